package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// BirdProtocol is the route protocol of BIRD's kernel routes (`proto
// bird`), the protocol of the routes Calico's calico-node programs.
const BirdProtocol = 12

// Adopt takes over the routes another daemon left in the main table under
// protocol from, to destinations inside one of within (the IP pools): each
// one it can carry (a blackhole, or a route through gateways) is written
// again under this handle's protocol and the other protocol's copy
// removed, so that the route stays in place, now as a route of ours that a
// later sync keeps, replaces or, once stale, removes. A node that ran
// Calico's BIRD leaves its routes (`persist`) when calico-node is
// replaced: without this they would hold their slots and Palisade's
// routes could never take them. Routes of another shape (through a device
// only) and routes outside within (another daemon's on the host, or
// those Calico's BIRD learned from external peers) are left alone. It
// returns how many routes it took over.
func (h *Handle) Adopt(from uint8, within []netip.Prefix) (int, error) {
	if from == 0 || from == h.proto || len(within) == 0 {
		return 0, nil
	}
	inside := func(dst netip.Prefix) bool {
		for _, p := range within {
			if p.Addr().Is4() == dst.Addr().Is4() && p.Bits() <= dst.Bits() && p.Contains(dst.Addr()) {
				return true
			}
		}
		return false
	}
	// The other protocol's routes, through this handle's socket (it is
	// bound to the right namespace): a view of it filtering and writing
	// under protocol from, used only while the handle's lock is held.
	other := &Handle{fd: h.fd, proto: from, rbuf: make([]byte, 1<<20)}
	h.mu.Lock()
	defer h.mu.Unlock()
	var routes []Route
	if err := other.Walk(func(r Route) { // other's own lock, not h's
		if (r.Blackhole || len(r.NextHops) > 0) && inside(r.Dst) {
			r.NextHops = slices.Clone(r.NextHops)
			routes = append(routes, r)
		}
	}); err != nil {
		return 0, fmt.Errorf("reading routes of protocol %d: %w", from, err)
	}
	if len(routes) == 0 {
		return 0, nil
	}
	ops := make([]Op, len(routes))
	for i, r := range routes {
		// Replacing takes the other protocol's route over in place when it
		// has the same metric; otherwise ours is added beside it.
		ops[i] = Op{Route: r, Replace: true}
	}
	failed := map[int]bool{}
	var errs []error
	for _, e := range h.applyLocked(ops) {
		for i := range ops {
			if ops[i].Route.Dst == e.Op.Route.Dst {
				failed[i] = true
			}
		}
		errs = append(errs, e)
	}
	var dels []Op
	for i, r := range routes {
		if !failed[i] {
			dels = append(dels, Op{Route: r, Delete: true})
		}
	}
	for _, e := range other.Apply(dels) {
		if !errors.Is(e.Err, unix.ESRCH) {
			errs = append(errs, e)
		}
	}
	return len(routes) - len(failed), errors.Join(errs...)
}
