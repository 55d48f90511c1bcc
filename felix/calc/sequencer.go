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
	routeClaims    map[netip.Prefix]map[EndpointID]string
	routesDirty    map[netip.Prefix]struct{}
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
		routeClaims:    map[netip.Prefix]map[EndpointID]string{},
		routesDirty:    map[netip.Prefix]struct{}{},
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

// setEndpointRoutes records the routes of an endpoint (nil when it is
// gone) and marks their destinations for flushRoutes.
func (q *sequencer) setEndpointRoutes(id EndpointID, routes []Route) {
	for _, r := range q.endpointRoutes[id] {
		delete(q.routeClaims[r.Dst], id)
		if len(q.routeClaims[r.Dst]) == 0 {
			delete(q.routeClaims, r.Dst)
		}
		q.routesDirty[r.Dst] = struct{}{}
	}
	if len(routes) == 0 {
		delete(q.endpointRoutes, id)
		return
	}
	q.endpointRoutes[id] = routes
	for _, r := range routes {
		if q.routeClaims[r.Dst] == nil {
			q.routeClaims[r.Dst] = map[EndpointID]string{}
		}
		q.routeClaims[r.Dst][id] = r.Iface
		q.routesDirty[r.Dst] = struct{}{}
	}
}

// flushRoutes sends the routes whose destination changed hands. When two
// endpoints claim one address the first by ID wins.
func (q *sequencer) flushRoutes(dp Dataplane) {
	var removals []netip.Prefix
	for _, dst := range slices.SortedFunc(maps.Keys(q.routesDirty), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }) {
		claims := q.routeClaims[dst]
		if len(claims) == 0 {
			if _, sent := q.sentRoutes[dst]; sent {
				delete(q.sentRoutes, dst)
				removals = append(removals, dst)
			}
			continue
		}
		iface := claims[sortedEndpointIDs(maps.Keys(claims))[0]]
		if q.sentRoutes[dst] != iface {
			q.sentRoutes[dst] = iface
			dp.OnRouteUpdate(Route{Dst: dst, Iface: iface})
		}
	}
	clear(q.routesDirty)
	for _, dst := range removals {
		dp.OnRouteRemoved(dst)
	}
}
