package bpf

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

func backends(n int) []calc.Backend {
	var out []calc.Backend
	for i := range n {
		out = append(out, calc.Backend{AddrPort: netip.MustParseAddrPort(fmt.Sprintf("10.65.0.%d:8080", i+1))})
	}
	return out
}

// TestMaglevTable: every backend gets its share of the slots (they
// differ by one at most); the table depends only on the backends (two
// nodes build the same one); removing a backend gives its slots to the
// others and moves few of theirs, adding one takes slots from each.
func TestMaglevTable(t *testing.T) {
	m := maglevSize(defaultMaglevEndpoints)
	if m != 10007 {
		t.Fatalf("table size %d, want 10007 (the first prime from 100 per endpoint)", m)
	}
	for _, n := range []int{1, 3, 7, 100} {
		bs := backends(n)
		tbl := maglevTable(bs, m)
		share := make([]int, n)
		for _, i := range tbl {
			share[i]++
		}
		lo, hi := m, 0
		for _, c := range share {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Errorf("%d backends: shares from %d to %d slots, want within one", n, lo, hi)
		}
		again := maglevTable(backends(n), m)
		for i := range tbl {
			if tbl[i] != again[i] {
				t.Fatalf("%d backends: two builds differ at slot %d", n, i)
			}
		}
	}
	// Change: the backend at index gone leaves (or one is added), and the
	// slots of the backends that stay are compared by address.
	for _, c := range []struct {
		name          string
		before, after []calc.Backend
		maxMoved      float64
	}{
		{"one of 3 removed", backends(3), append(backends(3)[:1], backends(3)[2:]...), 0.02},
		{"one of 10 removed", backends(10), append(backends(10)[:4], backends(10)[5:]...), 0.02},
		{"one added to 3", backends(3), backends(4), 0.02},
	} {
		a, b := maglevTable(c.before, m), maglevTable(c.after, m)
		in := map[netip.AddrPort]bool{}
		for _, x := range c.after {
			in[x.AddrPort] = true
		}
		moved, kept := 0, 0
		for i := range a {
			was, is := c.before[a[i]].AddrPort, c.after[b[i]].AddrPort
			if !in[was] {
				continue // the removed backend's slots move, of course
			}
			kept++
			if was != is && (len(c.after) < len(c.before) || is != c.after[len(c.after)-1].AddrPort) {
				moved++ // moved to another backend that was there before
			}
		}
		frac := float64(moved) / float64(kept)
		t.Logf("%s: %d of %d slots of the backends that stayed moved between them (%.2f%%)", c.name, moved, kept, 100*frac)
		if frac > c.maxMoved {
			t.Errorf("%s: %.2f%% of the staying backends' slots moved between them, want at most %.0f%%", c.name, 100*frac, 100*c.maxMoved)
		}
	}
}
