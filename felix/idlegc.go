package felix

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// idleGCDelay is how long felix's loop must have had nothing to do before
// it may collect garbage.
const idleGCDelay = 5 * time.Millisecond

// idleCollector runs Go's garbage collector while felix waits for work,
// once the heap has used more than half of its headroom before the next
// collection. Left to the runtime, that collection starts when an
// allocation crosses the goal, which is most likely while felix is busy
// (programming a new pod, say); for the few milliseconds it marks, it takes
// a processor and makes allocating goroutines help, and on a two-core node
// a pod programmed meanwhile took 2–4 ms longer. Collecting a little early,
// when idle, costs at most one collection per half headroom instead of one
// per headroom.
type idleCollector struct {
	samples []metrics.Sample
	running atomic.Bool
}

func newIdleCollector() *idleCollector {
	return &idleCollector{samples: []metrics.Sample{
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}}
}

// collectIfDue starts a collection in the background when the heap is
// past half its headroom and none started here is still running. It
// reports whether it started one.
func (c *idleCollector) collectIfDue() bool {
	metrics.Read(c.samples)
	for _, s := range c.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return false // a runtime without these metrics
		}
	}
	if !collectionDue(c.samples[0].Value.Uint64(), c.samples[1].Value.Uint64(), c.samples[2].Value.Uint64()) {
		return false
	}
	if !c.running.CompareAndSwap(false, true) {
		return false
	}
	go func() {
		defer c.running.Store(false)
		runtime.GC()
	}()
	return true
}

// collectionDue reports whether a heap of objects bytes, of which live
// bytes survived the last collection, has used more than half the way to
// the next collection's goal.
func collectionDue(goal, live, objects uint64) bool {
	if goal <= live || objects <= live {
		return false
	}
	return objects-live > (goal-live)/2
}
