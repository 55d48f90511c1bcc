package bpf

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"slices"

	"github.com/palisade-net/palisade/felix/calc"
)

// maglevTable fills a Maglev lookup table of size m (a prime) with the
// backends' indexes (Eisenbud et al., "Maglev: A Fast and Reliable
// Software Network Load Balancer", NSDI 2016, section 3.4): each backend
// walks its own permutation of the slots, given by its address alone,
// and the backends take turns claiming their next free slot. Every node
// builds the same table from the same backends, and a backend added or
// removed moves few slots of the others.
func maglevTable(bs []calc.Backend, m int) []int {
	n := len(bs)
	offset, skip, next := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i, b := range bs {
		sum := sha256.Sum256([]byte(b.AddrPort.String()))
		offset[i] = binary.BigEndian.Uint64(sum[:8]) % uint64(m)
		skip[i] = binary.BigEndian.Uint64(sum[8:16])%uint64(m-1) + 1
	}
	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	for filled := 0; n > 0 && filled < m; {
		for i := 0; i < n && filled < m; i++ {
			for {
				c := (offset[i] + next[i]*skip[i]) % uint64(m)
				next[i]++
				if table[c] < 0 {
					table[c] = i
					filled++
					break
				}
			}
		}
	}
	return table
}

// sortedFrontends are the frontends in a stable order (which ones get a
// Maglev table when there are more than bpfMaglevMaxServices).
func sortedFrontends(fs map[calc.Frontend]calc.FrontendBackends) []calc.Frontend {
	out := slices.Collect(maps.Keys(fs))
	slices.SortFunc(out, func(a, b calc.Frontend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return out
}
