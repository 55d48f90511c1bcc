package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// wantExhausted checks that err is the clear "pool exhausted" failure.
func wantExhausted(t *testing.T, who string, err error) {
	t.Helper()
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "pool exhausted") {
		t.Errorf("%s: error %v, want a \"pool exhausted\" error matching ErrExhausted", who, err)
	}
}

// TestRaceForLastAddress has two allocators, each with its own etcd
// connection (as two CNI processes would), race for the last free address
// of a pool, round after round: exactly one wins, the other gets a clear
// "pool exhausted" error, and the loser leaves no handle and no
// allocation behind.
func TestRaceForLastAddress(t *testing.T) {
	e := newEnv(t)
	e.pool("tiny", "10.30.0.0/30", func(s *v3.IPPoolSpec) { s.BlockSize = 30 })
	_, a1 := e.connect()
	_, a2 := e.connect()
	racers := []*Allocator{a1, a2}
	for round := range 15 {
		// Three of the four addresses taken; the racers are on the node
		// owning the block and on one that would have to borrow.
		if _, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 3, HandleID: "fill", Hostname: "node-a"}); err != nil {
			t.Fatalf("round %d: filling: %v", round, err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		got := make([]*Assignments, 2)
		errs := make([]error, 2)
		for i, a := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], _, errs[i] = a.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: fmt.Sprintf("racer-%d", i),
					Hostname: []string{"node-a", "node-b"}[i], Attrs: map[string]string{"round": fmt.Sprint(round)}})
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range racers {
			if errs[i] == nil {
				winners++
				if len(got[i].IPs) != 1 {
					t.Errorf("round %d: racer %d won with %v", round, i, got[i].IPs)
				}
				continue
			}
			wantExhausted(t, fmt.Sprintf("round %d: racer %d", round, i), errs[i])
			if got[i] != nil && len(got[i].IPs) != 0 {
				t.Errorf("round %d: losing racer %d was handed %v", round, i, got[i].IPs)
			}
			if _, ok := e.handles()[fmt.Sprintf("racer-%d", i)]; ok {
				t.Errorf("round %d: losing racer %d left a handle", round, i)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners (errors %v)", round, winners, errs)
		}
		e.checkInvariants()
		inUse := 0
		for _, b := range e.blocks() {
			inUse += len(b.Allocations)
		}
		if inUse != 4 {
			t.Fatalf("round %d: %d addresses allocated, want 4", round, inUse)
		}
		for _, h := range []string{"fill", "racer-0", "racer-1"} {
			_ = e.alloc.ReleaseByHandle(ctxT(t), h)
		}
	}
}

// TestExhaustedMidBurst fires more concurrent single-address assignments
// (from three nodes, each allocator on its own connection) than a pool
// holds: exactly as many succeed as the pool has addresses, every other
// one fails with a clear "pool exhausted" error, no address is handed out
// twice, and no failed request leaves a handle or an allocation.
func TestExhaustedMidBurst(t *testing.T) {
	const clients, size = 40, 16
	e := newEnv(t)
	e.pool("small", "10.31.0.0/28", func(s *v3.IPPoolSpec) { s.BlockSize = 30 })
	allocs := make([]*Allocator, clients)
	for i := range allocs {
		_, allocs[i] = e.connect()
	}
	got := make([]*Assignments, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], _, errs[i] = allocs[i].AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: fmt.Sprintf("burst-%d", i),
				Hostname: fmt.Sprintf("node-%d", i%3)})
		}()
	}
	close(start)
	wg.Wait()
	ok, seen := 0, map[netip.Addr]bool{}
	handles := e.handles()
	for i := range clients {
		if errs[i] != nil {
			wantExhausted(t, fmt.Sprintf("client %d", i), errs[i])
			if _, has := handles[fmt.Sprintf("burst-%d", i)]; has {
				t.Errorf("failed client %d left a handle", i)
			}
			continue
		}
		ok++
		for _, p := range got[i].IPs {
			if seen[p.Addr()] {
				t.Errorf("address %s handed out twice", p.Addr())
			}
			seen[p.Addr()] = true
		}
	}
	if ok != size {
		t.Errorf("%d assignments succeeded, want %d (the pool's size)", ok, size)
	}
	e.checkInvariants()
	if len(handles) != size {
		t.Errorf("%d handles stored, want %d", len(handles), size)
	}
}
