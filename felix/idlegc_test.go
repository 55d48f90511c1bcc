package felix

import (
	"runtime/metrics"
	"testing"
	"time"
)

// readMetrics reads runtime metrics of kind uint64.
func readMetrics(names ...string) []uint64 {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	out := make([]uint64, len(s))
	for i := range s {
		out[i] = s[i].Value.Uint64()
	}
	return out
}

// fillHeap leaves garbage up to 60 % of the heap's headroom:
// past half, short of the goal.
func fillHeap() {
	v := readMetrics("/gc/heap/goal:bytes", "/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes")
	goal, live, objects := v[0], v[1], v[2]
	for target := live + (goal-live)*3/5; objects < target; objects += 64 << 10 {
		sink = append(sink, make([]byte, 64<<10))
	}
	sink = nil
}

func TestCollectionDue(t *testing.T) {
	for _, c := range []struct {
		goal, live, objects uint64
		want                bool
	}{
		{goal: 20, live: 10, objects: 10, want: false}, // just collected
		{goal: 20, live: 10, objects: 15, want: false}, // half the headroom
		{goal: 20, live: 10, objects: 16, want: true},
		{goal: 20, live: 10, objects: 25, want: true},               // past the goal, not collected yet
		{goal: 10, live: 10, objects: 12, want: false},              // no headroom known
		{goal: 20, live: 10, objects: 5, want: false},               // fewer objects than live (metrics read apart)
		{goal: ^uint64(0), live: 10, objects: 1 << 40, want: false}, // GOGC=off
	} {
		if got := collectionDue(c.goal, c.live, c.objects); got != c.want {
			t.Errorf("collectionDue(goal %d, live %d, objects %d) = %v, want %v", c.goal, c.live, c.objects, got, c.want)
		}
	}
}

// sink keeps garbage from being optimised away.
var sink [][]byte

// TestIdleCollectorCollects fills the heap past half its headroom with
// garbage: the collector starts a collection (a forced one, as the
// runtime counts them), and once it has run nothing more is due.
func TestIdleCollectorCollects(t *testing.T) {
	c := newIdleCollector()
	for attempt := 0; ; attempt++ {
		fillHeap()
		forced := readMetrics("/gc/cycles/forced:gc-cycles")[0]
		if !c.collectIfDue() {
			if attempt < 3 {
				continue // the runtime collected on its own meanwhile
			}
			t.Fatal("the heap is past half its headroom and no collection started")
		}
		deadline := time.Now().Add(10 * time.Second)
		for readMetrics("/gc/cycles/forced:gc-cycles")[0] == forced {
			if time.Now().After(deadline) {
				t.Fatal("the collector said it started a collection, but none ran")
			}
			time.Sleep(time.Millisecond)
		}
		for c.running.Load() {
			time.Sleep(time.Millisecond)
		}
		if c.collectIfDue() {
			t.Error("a collection is due again right after one")
		}
		return
	}
}

// TestFelixCollectsWhenIdle runs felix (which applies at least every
// second here, its refresh interval) and fills the heap past half its
// headroom: a forced collection follows, felix's, made while it idles.
func TestFelixCollectsWhenIdle(t *testing.T) {
	c := newCluster(t, "NFT")
	c.addPod("ns-a", "idle", "10.65.0.2", nil, "") // waits until it is programmed
	for attempt := 0; attempt < 10; attempt++ {
		forced := readMetrics("/gc/cycles/forced:gc-cycles")[0]
		auto := readMetrics("/gc/cycles/automatic:gc-cycles")[0]
		fillHeap()
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if readMetrics("/gc/cycles/forced:gc-cycles")[0] > forced {
				return
			}
			if readMetrics("/gc/cycles/automatic:gc-cycles")[0] > auto {
				break // the runtime collected first: fill again
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Fatal("the heap stayed past half its headroom and felix never collected while idle")
}
