package ipam

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// countingKV passes every call to the real etcd KV and counts them.
type countingKV struct {
	datastore.KV
	calls atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string) (datastore.KVPair, error) {
	c.calls.Add(1)
	return c.KV.Get(ctx, key)
}

func (c *countingKV) List(ctx context.Context, prefix string) ([]datastore.KVPair, int64, error) {
	c.calls.Add(1)
	return c.KV.List(ctx, prefix)
}

func (c *countingKV) Create(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	c.calls.Add(1)
	return c.KV.Create(ctx, p)
}

func (c *countingKV) Update(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	c.calls.Add(1)
	return c.KV.Update(ctx, p)
}

func (c *countingKV) Delete(ctx context.Context, key string, rev int64) error {
	c.calls.Add(1)
	return c.KV.Delete(ctx, key, rev)
}

func (c *countingKV) Txn(ctx context.Context, conds []datastore.KVCond, ops []datastore.KVOp) (int64, []datastore.KVPair, error) {
	c.calls.Add(1)
	return c.KV.Txn(ctx, conds, ops)
}

// countingStore passes every call to the real store and counts reads.
type countingStore struct {
	datastore.Interface
	calls atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, k datastore.Key) (v3.Resource, error) {
	c.calls.Add(1)
	return c.Interface.Get(ctx, k)
}

func (c *countingStore) List(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, string, error) {
	c.calls.Add(1)
	return c.Interface.List(ctx, opts)
}

// TestWarmAutoAssignIsOneRoundTrip checks that an Allocator that has
// assigned before assigns the next address of the node's block with a
// single datastore call, and that the handle is written with it.
func TestWarmAutoAssignIsOneRoundTrip(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", nil)
	s, _ := e.connect()
	kv := &countingKV{KV: s.KV()}
	store := &countingStore{Interface: s}
	a := New(store, kv)
	if _, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: "h0", Hostname: "n"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		kv.calls.Store(0)
		store.calls.Store(0)
		h := "h" + string(rune('1'+i))
		v4, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: h, Hostname: "n"})
		if err != nil {
			t.Fatal(err)
		}
		if k, r := kv.calls.Load(), store.calls.Load(); k != 1 || r != 0 {
			t.Errorf("warm assign %d: %d KV calls and %d resource reads, want 1 and 0", i, k, r)
		}
		ips, err := e.alloc.IPsByHandle(ctxT(t), h)
		if err != nil || len(ips) != 1 || ips[0] != v4.IPs[0].Addr() {
			t.Errorf("handle %s holds %v (%v), want %s", h, ips, err, v4.IPs[0].Addr())
		}
	}
	e.checkInvariants()
}

// TestCachedStateFollowsChanges warms an Allocator, changes the cluster
// behind its back (with another connection), and checks its next
// assignment honours the change.
func TestCachedStateFollowsChanges(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(e *env)
		change func(t *testing.T, e *env)
		check  func(t *testing.T, e *env, got netip.Prefix)
	}{
		{
			name:  "pool disabled, another created",
			setup: func(e *env) { e.pool("a", "10.0.0.0/24", nil) },
			change: func(t *testing.T, e *env) {
				e.disablePool(t, "a")
				e.pool("b", "10.1.0.0/24", nil)
			},
			check: wantIn("10.1.0.0/24"),
		},
		{
			name:  "pool deleted, another created",
			setup: func(e *env) { e.pool("a", "10.0.0.0/24", nil) },
			change: func(t *testing.T, e *env) {
				e.pool("b", "10.1.0.0/24", nil)
				if _, err := e.store.Delete(ctxT(t), datastore.Key{Kind: v3.KindIPPool, Name: "a"}, ""); err != nil {
					t.Fatal(err)
				}
			},
			check: wantIn("10.1.0.0/24"),
		},
		{
			name:   "next addresses reserved",
			setup:  func(e *env) { e.pool("a", "10.0.0.0/24", nil) },
			change: func(t *testing.T, e *env) { e.reserve("r", "10.0.0.0/28") },
			check: func(t *testing.T, e *env, got netip.Prefix) {
				if mustPrefix(t, "10.0.0.0/28").Contains(got.Addr()) {
					t.Errorf("got reserved address %s", got)
				}
			},
		},
		{
			name: "node labels no longer selected",
			setup: func(e *env) {
				e.node("n", map[string]string{"rack": "1"})
				e.pool("rack1", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.NodeSelector = "rack == '1'" })
				e.pool("rest", "10.1.0.0/24", func(s *v3.IPPoolSpec) { s.NodeSelector = "rack != '1'" })
			},
			change: func(t *testing.T, e *env) {
				r, err := e.store.Get(ctxT(t), datastore.Key{Kind: v3.KindNode, Name: "n"})
				if err != nil {
					t.Fatal(err)
				}
				r.GetObjectMeta().Labels = map[string]string{"rack": "2"}
				if _, err := e.store.Update(ctxT(t), r); err != nil {
					t.Fatal(err)
				}
			},
			check: wantIn("10.1.0.0/24"),
		},
		{
			name:  "block written by another allocator",
			setup: func(e *env) { e.pool("a", "10.0.0.0/24", nil) },
			change: func(t *testing.T, e *env) {
				e.assign(AutoAssignArgs{Num4: 5, HandleID: "other", Hostname: "n"})
			},
			check: func(t *testing.T, e *env, got netip.Prefix) {
				al, err := e.alloc.GetAssignmentAttributes(ctxT(t), got.Addr())
				if err != nil || al.HandleID != "second" {
					t.Errorf("%s recorded as %+v (%v), want handle second", got, al, err)
				}
			},
		},
		{
			name:  "node's affinities released",
			setup: func(e *env) { e.pool("a", "10.0.0.0/24", nil) },
			change: func(t *testing.T, e *env) {
				if err := e.alloc.ReleaseByHandle(ctxT(t), "first"); err != nil {
					t.Fatal(err)
				}
				if err := e.alloc.ReleaseHostAffinities(ctxT(t), "n"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, e *env, got netip.Prefix) {
				if b := e.blocks()[got.Masked()]; b.Host != "n" {
					t.Errorf("%s from a block affine to %q, want n", got, b.Host)
				}
			},
		},
		{
			name:  "strict affinity switched on with the node's block full",
			setup: func(e *env) { e.pool("a", "10.0.0.0/30", func(s *v3.IPPoolSpec) { s.BlockSize = 31 }) },
			change: func(t *testing.T, e *env) {
				e.assign(AutoAssignArgs{Num4: 1, HandleID: "fill", Hostname: "n"})
				e.assign(AutoAssignArgs{Num4: 2, HandleID: "other-node", Hostname: "m"})
				if err := e.alloc.SetConfig(ctxT(t), Config{StrictAffinity: true, AutoAllocateBlocks: true}); err != nil {
					t.Fatal(err)
				}
			},
			check: nil, // the assignment must fail: see below
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e)
			_, a := e.connect()
			if _, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: "first", Hostname: "n"}); err != nil {
				t.Fatal(err)
			}
			tc.change(t, e)
			v4, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: "second", Hostname: "n"})
			if tc.check == nil {
				wantErrIs(t, err, ErrExhausted)
				e.checkInvariants()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e, v4.IPs[0])
			e.checkInvariants()
		})
	}
}

func wantIn(cidr string) func(t *testing.T, e *env, got netip.Prefix) {
	return func(t *testing.T, e *env, got netip.Prefix) {
		if !mustPrefix(t, cidr).Contains(got.Addr()) {
			t.Errorf("got %s, want an address in %s", got, cidr)
		}
	}
}

// TestReleaseByHandleTransactions checks release by handle reads the
// handle once and then each block and writes it with the handle in one
// transaction, and that it also clears counts an interrupted assignment
// left for blocks that hold none of the handle's addresses.
func TestReleaseByHandleTransactions(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	v4, _ := e.assign(AutoAssignArgs{Num4: 20, HandleID: "two-blocks", Hostname: "n"})
	e.assign(AutoAssignArgs{Num4: 1, HandleID: "neighbour", Hostname: "n"})
	blocks := map[netip.Prefix]bool{}
	for _, p := range v4 {
		blocks[p.Masked()] = true
	}
	if len(blocks) != 2 {
		t.Fatalf("20 addresses in %d blocks of 16, want 2", len(blocks))
	}
	// A count for a third block that holds nothing of the handle, as an
	// assignment interrupted between counting and writing leaves.
	if err := e.alloc.adjustHandle(ctxT(t), "two-blocks", mustPrefix(t, "10.0.0.128/28"), 3); err != nil {
		t.Fatal(err)
	}
	s, _ := e.connect()
	kv := &countingKV{KV: s.KV()}
	a := New(s, kv)
	if err := a.ReleaseByHandle(ctxT(t), "two-blocks"); err != nil {
		t.Fatal(err)
	}
	// 1 handle read and, beside it, the read of Calico's IPAM record for
	// ipCooldownSeconds (no IPAMConfiguration is stored), then per block
	// a read and a transaction.
	if got, want := kv.calls.Load(), int64(2+2*3); got != want {
		t.Errorf("release by handle made %d KV calls, want %d", got, want)
	}
	if h := e.handles(); len(h) != 1 || h["neighbour"] != 1 {
		t.Errorf("handles after release: %v, want only neighbour with 1", h)
	}
	for _, p := range v4 {
		if _, err := e.alloc.GetAssignmentAttributes(ctxT(t), p.Addr()); err == nil {
			t.Errorf("%s still assigned", p)
		}
	}
	e.checkInvariants()
}
