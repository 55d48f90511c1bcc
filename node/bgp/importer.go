package bgp

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/palisade-net/palisade/node/bgp/kernel"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// importer turns learned best routes and this node's blocks into the
// kernel's desired routes: learned prefixes over their (ECMP) next hops,
// except anything inside our own blocks, anything we originate ourselves
// (the service ranges every node advertises) or pointing at ourselves,
// plus a blackhole for each of our blocks.
type importer struct {
	sync *kernel.Syncer

	mu         sync.Mutex
	learned    map[netip.Prefix][]netip.Addr
	blocks     []netip.Prefix
	blackholes map[netip.Prefix]bool
	self       map[netip.Addr]bool
	own        map[netip.Prefix]bool
	felix      []netip.Prefix // VXLAN pools: felix routes them
	lastChange chan struct{}
	// The last setLocal arguments.
	primed     bool
	lastBlocks []netip.Prefix
	lastOwn    []netip.Prefix
	lastSelf   []netip.Addr
}

func newImporter(s *kernel.Syncer) *importer {
	return &importer{
		sync:       s,
		learned:    map[netip.Prefix][]netip.Addr{},
		blackholes: map[netip.Prefix]bool{},
		self:       map[netip.Addr]bool{},
		own:        map[netip.Prefix]bool{},
		lastChange: make(chan struct{}, 1),
	}
}

// wanted returns the kernel route for a learned prefix under the current
// filters (no next hops means none).
func (im *importer) wanted(pfx netip.Prefix, hops []netip.Addr) kernel.Route {
	r := kernel.Route{Dst: pfx}
	if im.blackholes[pfx] {
		r.Blackhole = true
		return r
	}
	if im.own[pfx] {
		return r
	}
	for _, p := range im.felix {
		if p.Bits() <= pfx.Bits() && p.Contains(pfx.Addr()) {
			return r
		}
	}
	for _, b := range im.blocks {
		if b.Overlaps(pfx) {
			return r
		}
	}
	for _, h := range hops {
		if !im.self[h] {
			r.NextHops = append(r.NextHops, h)
		}
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

// setFelixOwned sets the VXLAN pools' CIDRs, whose learned routes are
// never programmed (felix's overlay routes them), and recomputes every
// learned route when they changed.
func (im *importer) setFelixOwned(pools []netip.Prefix) {
	im.mu.Lock()
	if slices.Equal(pools, im.felix) {
		im.mu.Unlock()
		return
	}
	im.felix = slices.Clone(pools)
	out := make([]kernel.Route, 0, len(im.learned))
	for pfx, hops := range im.learned {
		out = append(out, im.wanted(pfx, hops))
	}
	im.mu.Unlock()
	im.sync.Update(out)
}

// setLocal sets our blocks (never imported, each a blackhole), the
// prefixes we originate (never imported) and our addresses, and recomputes
// every affected route.
func (im *importer) setLocal(blocks, originated []netip.Prefix, self []netip.Addr) {
	im.mu.Lock()
	// Called every round: nothing to do unless something changed.
	if im.primed && slices.Equal(blocks, im.lastBlocks) && slices.Equal(originated, im.lastOwn) && slices.Equal(self, im.lastSelf) {
		im.mu.Unlock()
		return
	}
	im.primed = true
	im.lastBlocks, im.lastOwn, im.lastSelf = slices.Clone(blocks), slices.Clone(originated), slices.Clone(self)
	im.own = make(map[netip.Prefix]bool, len(originated))
	for _, p := range originated {
		im.own[p] = true
	}
	old := im.blackholes
	im.blocks = blocks
	im.blackholes = make(map[netip.Prefix]bool, len(blocks))
	for _, b := range blocks {
		im.blackholes[b] = true
	}
	im.self = map[netip.Addr]bool{}
	for _, a := range self {
		im.self[a] = true
	}
	var out []kernel.Route
	for pfx := range old {
		if !im.blackholes[pfx] {
			out = append(out, im.wanted(pfx, im.learned[pfx]))
		}
	}
	for pfx, hops := range im.learned {
		out = append(out, im.wanted(pfx, hops))
	}
	for _, b := range blocks {
		out = append(out, kernel.Route{Dst: b, Blackhole: true})
	}
	im.mu.Unlock()
	im.sync.Update(out)
}
