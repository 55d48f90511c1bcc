package ipam

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// putRaw writes a value straight into etcd, behind IPAM's back.
func (e *env) putRaw(key, value string) {
	e.t.Helper()
	if _, err := e.store.Client().Put(ctxT(e.t), key, value); err != nil {
		e.t.Fatalf("writing %s: %v", key, err)
	}
}

// TestBadPoolsAreIgnored: pools that do not decode or that IPAM cannot use
// are never allocated from, logged and counted once, and do not stop the
// good pool from being used; with only bad pools, assignment finds no
// pool rather than failing on them.
func TestBadPoolsAreIgnored(t *testing.T) {
	e := newEnv(t)
	pools := datastore.ResourcePrefix + "ippools/"
	for name, value := range map[string]string{
		"a-not-json":   `{"kind":`,
		"b-bad-cidr":   `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"b-bad-cidr"},"spec":{"cidr":"10.1.0.0/33"}}`,
		"c-empty-cidr": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"c-empty-cidr"},"spec":{}}`,
		"d-bad-block":  `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"d-bad-block"},"spec":{"cidr":"10.2.0.0/16","blockSize":8}}`,
		"e-selector":   `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"e-selector"},"spec":{"cidr":"10.3.0.0/16","nodeSelector":"has("}}`,
	} {
		e.putRaw(pools+name, value)
	}
	before := e.store.BadValues().Total()
	_, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, Hostname: "node-a", HandleID: "h0"})
	wantErrIs(t, err, ErrNoPools)

	e.pool("z-good", "10.9.0.0/24", nil)
	for i := range 3 {
		v4, _ := e.assign(AutoAssignArgs{Num4: 1, Hostname: "node-a", HandleID: fmt.Sprintf("h%d", i+1)})
		if len(v4) != 1 || !netip.MustParsePrefix("10.9.0.0/24").Contains(v4[0].Addr()) {
			t.Fatalf("assignment %d got %v, want an address of the good pool", i, v4)
		}
	}
	if got := e.store.BadValues().Total() - before; got != 5 {
		t.Errorf("%d bad pools counted after four assignments, want each of the 5 once", got)
	}
	if _, err := e.alloc.ReleaseIPs(ctxT(t), netip.MustParseAddr("10.9.0.1")); err != nil {
		t.Errorf("release beside bad pools: %v", err)
	}
	e.checkInvariants()
}

// TestBadIPAMValuesAreSkipped: a block, an affinity and a handle that do
// not decode are skipped: assignment never hands out of, nor overwrites,
// the bad block; listing blocks and affinities still works; a handle whose
// record does not decode is released through its blocks' allocations.
func TestBadIPAMValuesAreSkipped(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	// The first block node-a would claim holds garbage; node-a's first
	// affinity is garbage too.
	var first netip.Prefix
	e.alloc.listPoolsOrFail(t)[0].candidateBlocks("node-a", func(c netip.Prefix) bool { first = c; return false })
	e.putRaw(blockKey(first), `{"cidr": 7}`)
	e.putRaw(affinityKey("node-a", netip.MustParsePrefix("10.0.0.240/28")), `{not json`)

	v4, _ := e.assign(AutoAssignArgs{Num4: 1, Hostname: "node-a", HandleID: "h1"})
	if first.Contains(v4[0].Addr()) {
		t.Fatalf("assigned %s out of block %s, whose stored value is garbage", v4[0], first)
	}
	if got, err := e.store.KV().Get(ctxT(t), blockKey(first)); err != nil || string(got.Value) != `{"cidr": 7}` {
		t.Fatalf("the bad block was overwritten: %q, %v", got.Value, err)
	}
	bs := e.blocks()
	if _, ok := bs[first]; ok || len(bs) != 1 {
		t.Fatalf("ListBlocks returned %v, want only the good block", bs)
	}
	if affs := e.affinities(); len(affs) != 1 {
		t.Fatalf("ListAffinities returned %v, want only the good affinity", affs)
	}

	e.putRaw(handleKey("h1"), `[]`)
	ips, err := e.alloc.IPsByHandle(ctxT(t), "h1")
	if err != nil || len(ips) != 1 || ips[0] != v4[0].Addr() {
		t.Fatalf("IPsByHandle with a bad record: %v, %v; want %s from the blocks", ips, err, v4[0].Addr())
	}
	if err := e.alloc.ReleaseByHandle(ctxT(t), "h1"); err != nil {
		t.Fatalf("ReleaseByHandle with a bad record: %v", err)
	}
	if _, err := e.alloc.GetAssignmentAttributes(ctxT(t), v4[0].Addr()); err == nil {
		t.Fatalf("%s still allocated after releasing its handle", v4[0])
	}
	if _, err := e.store.KV().Get(ctxT(t), handleKey("h1")); err == nil {
		t.Fatalf("the bad handle record is still stored")
	}
	if by := e.store.BadValues().ByKind(); by[badBlock] != 1 || by[badAffinity] != 1 || by[badHandle] != 1 {
		t.Errorf("bad IPAM values counted %v, want one block, one affinity and one handle", by)
	}
}

// listPoolsOrFail lists the parsed pools.
func (a *Allocator) listPoolsOrFail(t *testing.T) []pool {
	t.Helper()
	ps, err := a.listPools(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestReleaseOnlyWhatIsNamed: a release naming a handle or a sequence
// number frees an address only while that allocation holds it.
func TestReleaseOnlyWhatIsNamed(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", nil)
	v4, _ := e.assign(AutoAssignArgs{Num4: 2, Hostname: "node-a", HandleID: "mine"})
	a, b := v4[0].Addr(), v4[1].Addr()
	var seqA uint64
	for _, blk := range e.blocks() {
		for _, al := range blk.Allocations {
			if al.IP == a {
				seqA = al.SequenceNumber
			}
		}
	}
	wrongSeq := seqA + 1
	not, err := e.alloc.Release(ctxT(t),
		ReleaseOptions{Address: a, Handle: "someone-else"},
		ReleaseOptions{Address: b, SequenceNumber: &wrongSeq})
	if err != nil || len(not) != 2 {
		t.Fatalf("release with handle and sequence number that do not match: left %v (%v), want both left", not, err)
	}
	if got := e.handles()["mine"]; got != 2 {
		t.Fatalf("handle mine holds %d after a release that matched nothing, want 2", got)
	}
	not, err = e.alloc.Release(ctxT(t), ReleaseOptions{Address: a, Handle: "mine", SequenceNumber: &seqA})
	if err != nil || len(not) != 0 {
		t.Fatalf("release with the right handle and sequence number: left %v, %v", not, err)
	}
	if got := e.handles()["mine"]; got != 1 {
		t.Fatalf("handle mine holds %d after releasing one of two, want 1", got)
	}
	e.checkInvariants()
}

// TestConcurrentFirstAssignmentsClaimOneBlock: allocators that assign the
// first addresses of a node at nearly the same time (as the CNI plugins of
// pods started together do, one allocator each, having read the node's
// affinities ahead) claim one block between them when one holds enough.
// They start a millisecond apart, so that later ones list the blocks after
// an earlier one created its block.
func TestConcurrentFirstAssignmentsClaimOneBlock(t *testing.T) {
	const rounds, clients = 5, 8
	for round := range rounds {
		e := newEnv(t)
		e.pool("p", "10.0.0.0/16", nil) // /26 blocks: room for all
		allocs := make([]*Allocator, clients)
		for i := range allocs {
			_, allocs[i] = e.connect()
			if err := allocs[i].Prefetch(ctxT(t), "node-a", 4); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, clients)
		start := make(chan struct{})
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				time.Sleep(time.Duration(i) * time.Millisecond)
				_, _, errs[i] = allocs[i].AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, Hostname: "node-a", HandleID: fmt.Sprintf("h%d", i)})
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, allocator %d: %v", round, i, err)
			}
		}
		if bs := e.blocks(); len(bs) != 1 {
			t.Fatalf("round %d: %d concurrent first assignments claimed %d blocks, want 1: %v", round, clients, len(bs), bs)
		}
		e.checkInvariants()
	}
}

// TestReleaseUnusedBlocks: a node's empty block goes back to the pools
// once it has been empty for the grace period, as long as the node keeps
// another block; its last block is never released.
func TestReleaseUnusedBlocks(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 30 })
	v4, _ := e.assign(AutoAssignArgs{Num4: 5, Hostname: "node-a", HandleID: "h1"}) // two blocks of 4
	if bs := e.blocks(); len(bs) != 2 {
		t.Fatalf("%d blocks for 5 addresses, want 2", len(bs))
	}
	second := netip.PrefixFrom(v4[4].Addr(), 30).Masked()
	if _, err := e.alloc.ReleaseIPs(ctxT(t), v4[4].Addr()); err != nil {
		t.Fatal(err)
	}
	var tracker EmptyBlocks
	t0 := time.Now()
	const grace = 15 * time.Minute
	freed, err := e.alloc.ReleaseUnusedBlocks(ctxT(t), "node-a", &tracker, grace, t0)
	if err != nil || len(freed) != 0 {
		t.Fatalf("first look: released %v (%v), want nothing before the grace period", freed, err)
	}
	freed, err = e.alloc.ReleaseUnusedBlocks(ctxT(t), "node-a", &tracker, grace, t0.Add(grace))
	if err != nil || len(freed) != 1 || freed[0] != second {
		t.Fatalf("after the grace period: released %v (%v), want %s", freed, err, second)
	}
	if bs := e.blocks(); len(bs) != 1 {
		t.Fatalf("%d blocks left, want 1", len(bs))
	}
	if err := e.alloc.ReleaseByHandle(ctxT(t), "h1"); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{t0.Add(2 * grace), t0.Add(4 * grace)} {
		if freed, err := e.alloc.ReleaseUnusedBlocks(ctxT(t), "node-a", &tracker, grace, at); err != nil || len(freed) != 0 {
			t.Fatalf("released the node's last block: %v (%v)", freed, err)
		}
	}
	e.checkInvariants()
}

// TestReleaseUnusedBlocksStalledClaim: a plugin killed between claiming a
// block and confirming the claim leaves the block affine with a pending
// affinity; once empty for the grace period it is released like any other
// (before the node's confirmed blocks), so the node is not left with two
// blocks forever.
func TestReleaseUnusedBlocksStalledClaim(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 30 })
	v4, _ := e.assign(AutoAssignArgs{Num4: 5, Hostname: "node-a", HandleID: "h1"}) // two blocks of 4
	second := netip.PrefixFrom(v4[4].Addr(), 30).Masked()
	if _, err := e.alloc.ReleaseIPs(ctxT(t), v4[4].Addr()); err != nil {
		t.Fatal(err)
	}
	// The second block's claim never confirmed.
	key := affinityKey("node-a", second)
	kv, err := e.alloc.kv.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.alloc.kv.Update(ctxT(t), datastore.KVPair{Key: key, Value: encodeAffinity(AffinityPending), Revision: kv.Revision}); err != nil {
		t.Fatal(err)
	}
	var tracker EmptyBlocks
	t0 := time.Now()
	const grace = 15 * time.Minute
	if freed, err := e.alloc.ReleaseUnusedBlocks(ctxT(t), "node-a", &tracker, grace, t0); err != nil || len(freed) != 0 {
		t.Fatalf("first look: released %v (%v), want nothing before the grace period", freed, err)
	}
	freed, err := e.alloc.ReleaseUnusedBlocks(ctxT(t), "node-a", &tracker, grace, t0.Add(grace))
	if err != nil || len(freed) != 1 || freed[0] != second {
		t.Fatalf("after the grace period: released %v (%v), want the stalled claim's block %s", freed, err, second)
	}
	if bs := e.blocks(); len(bs) != 1 {
		t.Fatalf("%d blocks left, want 1", len(bs))
	}
}
