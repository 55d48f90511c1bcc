package ipam

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestContendedNodeSpreadsWithinLimits runs ten warm Allocators for one
// node at once on a pool of 16 blocks: they may spread over extra blocks,
// but no address goes out twice, the state stays consistent, and another
// node still gets a block of its own afterwards.
func TestContendedNodeSpreadsWithinLimits(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	const clients, each = 10, 6
	allocs := make([]*Allocator, clients)
	for i := range allocs {
		_, allocs[i] = e.connect()
		// Warm each Allocator so the next assignments take the cached path.
		if _, _, err := allocs[i].AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: fmt.Sprintf("warm-%d", i), Hostname: "busy"}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[netip.Addr]string{}
	var wg sync.WaitGroup
	for i := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				h := fmt.Sprintf("h-%d-%d", i, j)
				v4, _, err := allocs[i].AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: h, Hostname: "busy"})
				if err != nil {
					t.Errorf("%s: %v", h, err)
					return
				}
				mu.Lock()
				if prev, dup := seen[v4.IPs[0].Addr()]; dup {
					t.Errorf("%s handed to %s and %s", v4.IPs[0].Addr(), prev, h)
				}
				seen[v4.IPs[0].Addr()] = h
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	e.checkInvariants()
	busy := 0
	for _, b := range e.blocks() {
		if b.Host != "busy" {
			t.Errorf("block %s affine to %q", b.CIDR, b.Host)
		}
		busy++
	}
	t.Logf("busy node holds %d blocks", busy)
	// 70 addresses need 5 blocks of 16; spreading may claim while at
	// most half the pool's 16 blocks are taken.
	if busy < 5 || busy > 9 {
		t.Errorf("busy node holds %d blocks, want 5 to 9", busy)
	}
	v4, _ := e.assign(AutoAssignArgs{Num4: 1, HandleID: "other", Hostname: "other"})
	if b := e.blocks()[v4[0].Masked()]; b.Host != "other" {
		t.Errorf("other node got %s from a block affine to %q, want its own", v4[0], b.Host)
	}
}

func TestMostlyUnclaimed(t *testing.T) {
	p, err := parsePool(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "p"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/24", BlockSize: 26}})
	if err != nil {
		t.Fatal(err)
	}
	other := netip.MustParsePrefix("10.9.0.0/26")
	tests := []struct {
		name  string
		taken []string
		want  bool
	}{
		{"none taken", nil, true},
		{"two of four", []string{"10.0.0.0/26", "10.0.0.64/26"}, true},
		{"three of four", []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26"}, false},
		{"blocks of other pools do not count", []string{"10.0.0.0/26", "10.0.0.64/26", other.String()}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			taken := map[netip.Prefix]bool{}
			for _, c := range tc.taken {
				taken[netip.MustParsePrefix(c)] = true
			}
			if got := mostlyUnclaimed([]pool{p}, taken); got != tc.want {
				t.Errorf("mostlyUnclaimed(%v) = %t, want %t", tc.taken, got, tc.want)
			}
		})
	}
}

func TestSpreadOrder(t *testing.T) {
	affs := []Affinity{}
	for i := range 6 {
		affs = append(affs, Affinity{Host: "n", CIDR: netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i))})
	}
	full := newBlock(affs[2].CIDR, "n")
	full.assign(256, "h", nil, nil)
	var c cache
	c.seed = 1
	c.setBlock(affs[2].CIDR, full, 5)
	c.setBlock(affs[4].CIDR, newBlock(affs[4].CIDR, "n"), 6)
	c.prefer("n", affs[4].CIDR)
	got := c.spreadOrder("n", affs)
	if len(got) != len(affs) {
		t.Fatalf("spreadOrder returned %d blocks, want %d", len(got), len(affs))
	}
	if got[0].CIDR != affs[4].CIDR {
		t.Errorf("first block %s, want the preferred %s", got[0].CIDR, affs[4].CIDR)
	}
	if got[len(got)-1].CIDR != affs[2].CIDR {
		t.Errorf("last block %s, want the full %s", got[len(got)-1].CIDR, affs[2].CIDR)
	}
	// Another Allocator (seed) orders the blocks with room differently.
	differs := false
	for seed := uint64(2); seed < 50 && !differs; seed++ {
		d := cache{seed: seed}
		other := d.spreadOrder("n", affs)
		for i := range other {
			differs = differs || other[i].CIDR != c.spreadOrder("n", affs)[i].CIDR
		}
	}
	if !differs {
		t.Error("every seed orders the blocks the same way")
	}
}
