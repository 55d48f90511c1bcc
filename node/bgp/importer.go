package bgp

import (
	"net/netip"
	"reflect"
	"sync"

	"github.com/palisade-net/palisade/node/bgp/kernel"
	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// localRoutes is what the importer needs to know about this node.
type localRoutes struct {
	// Blocks are this node's blocks: never imported, each a blackhole...
	Blocks []netip.Prefix
	// ...except the host routes of Lent, addresses of our blocks other
	// nodes hold.
	Lent []netip.Prefix
	// Originated are the prefixes we advertise ourselves: never imported.
	Originated []netip.Prefix
	// Self are our addresses: a route through them is no route.
	Self []netip.Addr
	// Ignored are the subnets of BGPConfiguration ignoredInterfaces: a
	// next hop reached through them is not used.
	Ignored []netip.Prefix
	// FelixOwned are the CIDRs of VXLAN pools: nothing learned inside
	// them is programmed, felix's overlay routes them.
	FelixOwned []netip.Prefix
	// Static are the routes to BGP peers through their reachableBy
	// gateway: programmed as they are, whatever is learned for the same
	// prefix.
	Static []kernel.Route
}

// importer turns learned best routes and this node's blocks into the
// kernel's desired routes: the routes to peers through their reachableBy
// gateways, then learned prefixes over their (ECMP) next hops,
// except anything inside a VXLAN pool (felix's), inside our own blocks
// (other than the host routes of addresses we lent), anything we
// originate ourselves (the service ranges every node advertises) or
// pointing at ourselves or through an ignored interface, plus a blackhole
// for each of our blocks.
type importer struct {
	sync *kernel.Syncer

	mu         sync.Mutex
	learned    map[netip.Prefix][]netip.Addr
	local      localRoutes
	primed     bool
	static     map[netip.Prefix]kernel.Route
	blackholes map[netip.Prefix]bool
	lent       map[netip.Prefix]bool
	self       map[netip.Addr]bool
	own        map[netip.Prefix]bool
	lastChange chan struct{}
}

func newImporter(s *kernel.Syncer) *importer {
	return &importer{
		sync:       s,
		learned:    map[netip.Prefix][]netip.Addr{},
		static:     map[netip.Prefix]kernel.Route{},
		blackholes: map[netip.Prefix]bool{},
		lent:       map[netip.Prefix]bool{},
		self:       map[netip.Addr]bool{},
		own:        map[netip.Prefix]bool{},
		lastChange: make(chan struct{}, 1),
	}
}

// wanted returns the kernel route for a learned prefix under the current
// filters (no next hops means none).
func (im *importer) wanted(pfx netip.Prefix, hops []netip.Addr) kernel.Route {
	if r, ok := im.static[pfx]; ok {
		return r
	}
	r := kernel.Route{Dst: pfx}
	if im.blackholes[pfx] {
		r.Blackhole = true
		return r
	}
	if im.own[pfx] {
		return r
	}
	for _, p := range im.local.FelixOwned {
		if p.Bits() <= pfx.Bits() && p.Contains(pfx.Addr()) {
			return r
		}
	}
	if !im.lent[pfx] {
		for _, b := range im.local.Blocks {
			if b.Overlaps(pfx) {
				return r
			}
		}
	}
next:
	for _, h := range hops {
		if im.self[h] {
			continue
		}
		for _, n := range im.local.Ignored {
			if n.Contains(h) {
				continue next
			}
		}
		r.NextHops = append(r.NextHops, h)
	}
	return r
}

// onRoutes applies learned route changes.
func (im *importer) onRoutes(rs []router.Route) {
	im.mu.Lock()
	out := make([]kernel.Route, 0, len(rs))
	for _, r := range rs {
		if len(r.NextHops) == 0 {
			delete(im.learned, r.Prefix)
		} else {
			im.learned[r.Prefix] = r.NextHops
		}
		out = append(out, im.wanted(r.Prefix, r.NextHops))
	}
	im.mu.Unlock()
	im.sync.Update(out)
	select {
	case im.lastChange <- struct{}{}:
	default:
	}
}

// setLocal sets what the importer knows about this node and recomputes
// every affected route.
func (im *importer) setLocal(l localRoutes) {
	im.mu.Lock()
	// Called every round: nothing to do unless something changed.
	if im.primed && reflect.DeepEqual(l, im.local) {
		im.mu.Unlock()
		return
	}
	im.primed = true
	im.local = l
	im.own = make(map[netip.Prefix]bool, len(l.Originated))
	for _, p := range l.Originated {
		im.own[p] = true
	}
	im.lent = make(map[netip.Prefix]bool, len(l.Lent))
	for _, p := range l.Lent {
		im.lent[p] = true
	}
	old := im.blackholes
	im.blackholes = make(map[netip.Prefix]bool, len(l.Blocks))
	for _, b := range l.Blocks {
		im.blackholes[b] = true
	}
	im.self = map[netip.Addr]bool{}
	for _, a := range l.Self {
		im.self[a] = true
	}
	oldStatic := im.static
	im.static = make(map[netip.Prefix]kernel.Route, len(l.Static))
	for _, r := range l.Static {
		im.static[r.Dst] = r
	}
	var out []kernel.Route
	for pfx := range old {
		if !im.blackholes[pfx] {
			out = append(out, im.wanted(pfx, im.learned[pfx]))
		}
	}
	for pfx := range oldStatic {
		if _, ok := im.static[pfx]; !ok {
			out = append(out, im.wanted(pfx, im.learned[pfx]))
		}
	}
	for _, r := range im.static {
		out = append(out, r)
	}
	for pfx, hops := range im.learned {
		out = append(out, im.wanted(pfx, hops))
	}
	for _, b := range l.Blocks {
		out = append(out, kernel.Route{Dst: b, Blackhole: true})
	}
	im.mu.Unlock()
	im.sync.Update(out)
}

// reachableRoutes are the routes to the peers that name a reachableBy
// gateway: the peer's address alone, through the gateway.
func reachableRoutes(ps []peers.Peer) []kernel.Route {
	var out []kernel.Route
	for _, p := range ps {
		if p.ReachableBy.IsValid() {
			out = append(out, kernel.Route{Dst: netip.PrefixFrom(p.Address, p.Address.BitLen()), NextHops: []netip.Addr{p.ReachableBy}})
		}
	}
	return out
}
