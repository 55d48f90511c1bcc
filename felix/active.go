package felix

import (
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/metrics"
)

// activeCounts are the endpoints, policies and IP sets (with their sizes)
// the calculation graph has given the dataplane: what this host enforces.
type activeCounts struct {
	endpoints map[calc.EndpointID]struct{}
	policies  map[calc.PolicyID]struct{}
	sets      map[string]int
	members   int
}

func (a *activeCounts) init() {
	if a.endpoints == nil {
		a.endpoints, a.policies, a.sets = map[calc.EndpointID]struct{}{}, map[calc.PolicyID]struct{}{}, map[string]int{}
	}
}

func (a *activeCounts) setSize(id string, n int) {
	a.init()
	a.members += n - a.sets[id]
	a.sets[id] = n
}

// report sets the active gauges of m.
func (s *dataplaneSwitch) report(m *metrics.Felix) {
	a := &s.active
	selectors := len(a.sets)
	for id := range a.sets {
		if calc.IsNodeSet(id) {
			selectors--
		}
	}
	m.Active(len(a.endpoints), len(a.policies), selectors, len(a.sets), a.members)
}
