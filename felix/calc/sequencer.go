package calc

import (
	"maps"
	"net/netip"
	"slices"
)

// memberDelta is the pending change of a set already sent.
type memberDelta struct {
	added, removed map[string]struct{}
}

// sequencer is the last stage: it collects what changed since the last
// Flush and hands it to the Dataplane in dependency order, IP sets before
// the policies that use them, policies before the endpoints that jump to
// them, removals in reverse.
type sequencer struct {
	sentSets       map[string]bool
	setFull        map[string]*ipSetState
	setDelta       map[string]*memberDelta
	setRemovals    map[string]struct{}
	sentPolicies   map[PolicyID]bool
	sentProfiles   map[string]bool
	sentEndpoints  map[EndpointID]bool
	endpointRoutes map[EndpointID][]Route
	sentRoutes     map[netip.Prefix]string
	sentInSync     bool
}

func newSequencer() *sequencer {
	return &sequencer{
		sentSets:       map[string]bool{},
		setFull:        map[string]*ipSetState{},
		setDelta:       map[string]*memberDelta{},
		setRemovals:    map[string]struct{}{},
		sentPolicies:   map[PolicyID]bool{},
		sentProfiles:   map[string]bool{},
		sentEndpoints:  map[EndpointID]bool{},
		endpointRoutes: map[EndpointID][]Route{},
		sentRoutes:     map[netip.Prefix]string{},
	}
}

func (q *sequencer) setActivated(s *ipSetState) {
	id := s.spec.id
	delete(q.setRemovals, id)
	delete(q.setDelta, id)
	q.setFull[id] = s
}

func (q *sequencer) setDeactivated(id string) {
	delete(q.setFull, id)
	delete(q.setDelta, id)
	if q.sentSets[id] {
		q.setRemovals[id] = struct{}{}
	}
}

func (q *sequencer) delta(id string) *memberDelta {
	d := q.setDelta[id]
	if d == nil {
		d = &memberDelta{added: map[string]struct{}{}, removed: map[string]struct{}{}}
		q.setDelta[id] = d
	}
	return d
}

func (q *sequencer) memberAdded(s *ipSetState, m string) {
	id := s.spec.id
	if _, full := q.setFull[id]; full || !q.sentSets[id] {
		return
	}
	d := q.delta(id)
	if _, ok := d.removed[m]; ok {
		delete(d.removed, m)
		return
	}
	d.added[m] = struct{}{}
}

func (q *sequencer) memberRemoved(s *ipSetState, m string) {
	id := s.spec.id
	if _, full := q.setFull[id]; full || !q.sentSets[id] {
		return
	}
	d := q.delta(id)
	if _, ok := d.added[m]; ok {
		delete(d.added, m)
		return
	}
	d.removed[m] = struct{}{}
}

// flushSets sends the sets added or changed.
func (q *sequencer) flushSets(dp Dataplane) {
	for _, id := range slices.Sorted(maps.Keys(q.setFull)) {
		s := q.setFull[id]
		members := slices.Sorted(maps.Keys(s.members))
		dp.OnIPSetUpdate(&IPSet{ID: id, Type: s.spec.setType(), Members: members})
		q.sentSets[id] = true
	}
	clear(q.setFull)
	for _, id := range slices.Sorted(maps.Keys(q.setDelta)) {
		d := q.setDelta[id]
		if len(d.added) == 0 && len(d.removed) == 0 {
			continue
		}
		dp.OnIPSetDelta(id, slices.Sorted(maps.Keys(d.added)), slices.Sorted(maps.Keys(d.removed)))
	}
	clear(q.setDelta)
}

// flushSetRemovals sends the sets no longer needed.
func (q *sequencer) flushSetRemovals(dp Dataplane) {
	for _, id := range slices.Sorted(maps.Keys(q.setRemovals)) {
		dp.OnIPSetRemoved(id)
		delete(q.sentSets, id)
	}
	clear(q.setRemovals)
}

// endpointRoutesChanged records the routes of an endpoint (nil when it is
// gone) and returns the routes to add and the destinations to remove.
func (q *sequencer) endpointRoutesChanged(id EndpointID, routes []Route) (add []Route, remove []netip.Prefix) {
	old := q.endpointRoutes[id]
	if len(routes) == 0 {
		delete(q.endpointRoutes, id)
	} else {
		q.endpointRoutes[id] = routes
	}
	keep := map[netip.Prefix]bool{}
	for _, r := range routes {
		keep[r.Dst] = true
		if q.sentRoutes[r.Dst] != r.Iface {
			q.sentRoutes[r.Dst] = r.Iface
			add = append(add, r)
		}
	}
	for _, r := range old {
		if !keep[r.Dst] && q.sentRoutes[r.Dst] == r.Iface {
			delete(q.sentRoutes, r.Dst)
			remove = append(remove, r.Dst)
		}
	}
	return add, remove
}
