package ipam

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// env is an embedded etcd with one connection and an Allocator on it.
type env struct {
	t         testing.TB
	endpoints []string
	store     *etcdv3.Store
	alloc     *Allocator
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, endpoints: etcdtest.Start(t)}
	e.store, e.alloc = e.connect()
	return e
}

// connect opens a new connection and Allocator on the same etcd.
func (e *env) connect() (*etcdv3.Store, *Allocator) {
	e.t.Helper()
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: e.endpoints})
	if err != nil {
		e.t.Fatalf("connecting to etcd: %v", err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s, New(s, s.KV())
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// disablePool sets disabled on an existing pool.
func (e *env) disablePool(t *testing.T, name string) {
	t.Helper()
	r, err := e.store.Get(ctxT(t), datastore.Key{Kind: v3.KindIPPool, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	p := r.(*v3.IPPool)
	p.Spec.Disabled = true
	if _, err := e.store.Update(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
}

func (e *env) pool(name, cidr string, mod func(*v3.IPPoolSpec)) {
	e.t.Helper()
	p := &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr}}
	if mod != nil {
		mod(&p.Spec)
	}
	if _, err := e.store.Create(context.Background(), p); err != nil {
		e.t.Fatalf("creating pool %s: %v", name, err)
	}
}

func (e *env) node(name string, labels map[string]string) {
	e.t.Helper()
	n := &v3.Node{ObjectMeta: v3.ObjectMeta{Name: name, Labels: labels}}
	if _, err := e.store.Create(context.Background(), n); err != nil {
		e.t.Fatalf("creating node %s: %v", name, err)
	}
}

func (e *env) reserve(name string, cidrs ...string) {
	e.t.Helper()
	r := &v3.IPReservation{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPReservationSpec{ReservedCIDRs: cidrs}}
	if _, err := e.store.Create(context.Background(), r); err != nil {
		e.t.Fatalf("creating reservation %s: %v", name, err)
	}
}

// assign auto-assigns and fails the test on error.
func (e *env) assign(args AutoAssignArgs) (v4, v6 []netip.Prefix) {
	e.t.Helper()
	a4, a6, err := e.alloc.AutoAssign(ctxT(e.t), args)
	if err != nil {
		e.t.Fatalf("auto-assign %+v: %v", args, err)
	}
	if a4 != nil {
		v4 = a4.IPs
	}
	if a6 != nil {
		v6 = a6.IPs
	}
	return v4, v6
}

// blocks returns the stored blocks by CIDR.
func (e *env) blocks() map[netip.Prefix]Block {
	e.t.Helper()
	bs, err := e.alloc.ListBlocks(ctxT(e.t))
	if err != nil {
		e.t.Fatalf("listing blocks: %v", err)
	}
	out := map[netip.Prefix]Block{}
	for _, b := range bs {
		out[b.CIDR] = b
	}
	return out
}

// affinities returns the stored affinities as "host cidr" → state.
func (e *env) affinities() map[string]AffinityState {
	e.t.Helper()
	as, err := e.alloc.ListAffinities(ctxT(e.t))
	if err != nil {
		e.t.Fatalf("listing affinities: %v", err)
	}
	out := map[string]AffinityState{}
	for _, a := range as {
		out[a.Host+" "+a.CIDR.String()] = a.State
	}
	return out
}

// handles returns handle ID → total count.
func (e *env) handles() map[string]int {
	e.t.Helper()
	hs, err := e.alloc.ListHandles(ctxT(e.t))
	if err != nil {
		e.t.Fatalf("listing handles: %v", err)
	}
	out := map[string]int{}
	for _, h := range hs {
		for _, n := range h.Blocks {
			out[h.ID] += n
		}
	}
	return out
}

// checkInvariants asserts the stored state agrees with itself: every
// handle count equals the allocations its block holds for it, every
// confirmed affinity names a block affine to that host, and no address is
// allocated twice.
func (e *env) checkInvariants() {
	e.t.Helper()
	blocks := e.blocks()
	fromBlocks := map[string]map[netip.Prefix]int{}
	seen := map[netip.Addr]bool{}
	for _, b := range blocks {
		for _, al := range b.Allocations {
			if seen[al.IP] {
				e.t.Errorf("address %s allocated twice", al.IP)
			}
			seen[al.IP] = true
			if al.HandleID == "" {
				continue
			}
			if fromBlocks[al.HandleID] == nil {
				fromBlocks[al.HandleID] = map[netip.Prefix]int{}
			}
			fromBlocks[al.HandleID][b.CIDR]++
		}
	}
	hs, err := e.alloc.ListHandles(ctxT(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	stored := map[string]map[netip.Prefix]int{}
	for _, h := range hs {
		stored[h.ID] = h.Blocks
	}
	for id, want := range fromBlocks {
		for c, n := range want {
			if stored[id][c] != n {
				e.t.Errorf("handle %q block %s: stored count %d, blocks hold %d", id, c, stored[id][c], n)
			}
		}
	}
	for id, got := range stored {
		for c, n := range got {
			if fromBlocks[id][c] != n {
				e.t.Errorf("handle %q block %s: stored count %d, blocks hold %d", id, c, n, fromBlocks[id][c])
			}
		}
	}
	as, err := e.alloc.ListAffinities(ctxT(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range as {
		if a.State != AffinityConfirmed {
			e.t.Errorf("affinity %s %s left in state %s", a.Host, a.CIDR, a.State)
			continue
		}
		if b, ok := blocks[a.CIDR]; !ok || b.Host != a.Host {
			e.t.Errorf("affinity %s %s: block exists %t, affine to %q", a.Host, a.CIDR, ok, b.Host)
		}
	}
}

func wantErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one matching %v", err, target)
	}
}

var _ = datastore.ErrNotFound
