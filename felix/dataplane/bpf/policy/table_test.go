package policy

import (
	"slices"
	"testing"
)

// TestSweepIntervalsOfOneEntry: an entry is in the class of every value
// one of its intervals holds, whatever order the events of one position
// come in: intervals that meet (one ends where the next begins) and
// intervals that overlap, over many orders of the map the entries come
// from.
func TestSweepIntervalsOfOneEntry(t *testing.T) {
	dep := map[int32]ivals{
		1: {{0, 5}, {6, 10}},      // meet at 6
		2: {{20, 30}, {25, 40}},   // overlap 25–30
		3: {{100, 200}},           // alone
		4: {{6, 6}, {7, 0xffff}},  // a single value, then the rest
		5: {{10, 10}, {10, 12}},   // the same start twice
		6: {{300, 310}, {50, 60}}, // out of order
	}
	want := func(v uint32) []int32 {
		set := []int32{9} // the base entry holds everywhere
		for e, iv := range dep {
			for _, x := range iv {
				if x.lo <= v && v <= x.hi {
					set = append(set, e)
					break
				}
			}
		}
		slices.Sort(set)
		return set
	}
	for round := 0; round < 50; round++ { // map order differs run to run
		var all [][]int32
		c := sweep(&all, map[string]int{}, []int32{9}, dep)
		for v := uint32(0); v <= 0xffff; v++ {
			if got := all[c.at(v)]; !slices.Equal(got, want(v)) {
				t.Fatalf("round %d: value %d is in class %v, want %v", round, v, got, want(v))
			}
		}
	}
}
