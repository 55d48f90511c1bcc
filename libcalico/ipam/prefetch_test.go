package ipam

import (
	"net/netip"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestPrefetchedAssign: a fresh Allocator (a CNI plugin's) that prefetched
// the node's state assigns from the node's block in one round trip, and
// claims the node's first block without reading pools and affinities
// again.
func TestPrefetchedAssign(t *testing.T) {
	cases := []struct {
		name string
		// warm assigns once beforehand, so the node owns a block.
		warm              bool
		wantKV, wantStore int64
	}{
		{name: "node owns a block", warm: true, wantKV: 1, wantStore: 0},
		// Listing blocks, the node's affinities again (for a block a
		// concurrent assignment claimed meanwhile), pending affinity,
		// block, confirmed affinity, assignment.
		{name: "node's first block", warm: false, wantKV: 6, wantStore: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 26 })
			if tc.warm {
				e.assign(AutoAssignArgs{Num4: 1, HandleID: "h0", Hostname: "n"})
			}
			s, _ := e.connect()
			kv := &countingKV{KV: s.KV()}
			store := &countingStore{Interface: s}
			a := New(store, kv)
			if err := a.Prefetch(ctxT(t), "n", 4); err != nil {
				t.Fatalf("prefetch: %v", err)
			}
			kv.calls.Store(0)
			store.calls.Store(0)
			v4, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: "h1", Hostname: "n"})
			if err != nil {
				t.Fatalf("assign after prefetch: %v", err)
			}
			if k, r := kv.calls.Load(), store.calls.Load(); k != tc.wantKV || r != tc.wantStore {
				t.Errorf("assign after prefetch: %d KV calls and %d resource reads, want %d and %d", k, r, tc.wantKV, tc.wantStore)
			}
			ips, err := e.alloc.IPsByHandle(ctxT(t), "h1")
			if err != nil || len(ips) != 1 || ips[0] != v4.IPs[0].Addr() {
				t.Errorf("handle h1 holds %v (%v), want %s", ips, err, v4.IPs[0].Addr())
			}
			e.checkInvariants()
		})
	}
}

// TestPrefetchedStateFollowsChanges: what Prefetch read is only a
// starting point; an assignment after the cluster changed behind it still
// honours the change.
func TestPrefetchedStateFollowsChanges(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, e *env)
		check  func(t *testing.T, e *env, got netip.Prefix)
	}{
		{
			name: "another allocator assigned from the block",
			change: func(t *testing.T, e *env) {
				for i := range 3 {
					e.assign(AutoAssignArgs{Num4: 1, HandleID: "other" + string(rune('a'+i)), Hostname: "n"})
				}
			},
			check: wantIn("10.0.0.0/24"),
		},
		{
			name: "pool disabled, another created",
			change: func(t *testing.T, e *env) {
				e.disablePool(t, "a")
				e.pool("b", "10.1.0.0/24", nil)
			},
			check: wantIn("10.1.0.0/24"),
		},
		{
			name: "node's affinities released",
			change: func(t *testing.T, e *env) {
				if err := e.alloc.ReleaseHostAffinities(ctxT(t), "n"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, e *env, got netip.Prefix) {
				if b, ok := e.blocks()[netip.PrefixFrom(got.Addr(), 26).Masked()]; !ok || b.Host != "n" {
					t.Errorf("%s assigned from block %+v, want a block affine to n", got, b)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.pool("a", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 26 })
			e.assign(AutoAssignArgs{Num4: 1, HandleID: "h0", Hostname: "n"})
			_, a := e.connect()
			if err := a.Prefetch(ctxT(t), "n", 4); err != nil {
				t.Fatalf("prefetch: %v", err)
			}
			tc.change(t, e)
			v4, _, err := a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: "h1", Hostname: "n"})
			if err != nil {
				t.Fatalf("assign after the change: %v", err)
			}
			tc.check(t, e, v4.IPs[0])
			e.checkInvariants()
		})
	}
}
