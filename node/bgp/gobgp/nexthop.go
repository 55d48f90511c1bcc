package gobgp

import (
	"context"
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
)

// Names of the GoBGP objects that implement BGPPeer keepOriginalNextHop:
// a neighbor set of the peers concerned and a global export policy that
// leaves the next hop of routes sent to them unchanged (GoBGP otherwise
// sets itself as next hop towards eBGP peers).
const (
	keepNHSet       = "palisade-keep-next-hop"
	keepNHPolicy    = "palisade-export"
	keepNHStatement = "palisade-keep-next-hop"
	// keepNHSentinel keeps the neighbor set from ever being empty: GoBGP
	// treats an empty neighbor set as matching every peer. No session has
	// this address.
	keepNHSentinel = "0.0.0.0/32"
)

// installKeepNextHop creates the neighbor set (holding only the sentinel)
// and assigns the export policy, once, when the speaker starts.
func (r *Router) installKeepNextHop(ctx context.Context) error {
	set := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: keepNHSet, List: []string{keepNHSentinel}}
	if err := r.srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
		return fmt.Errorf("creating neighbor set %s: %w", keepNHSet, err)
	}
	pol := &api.Policy{Name: keepNHPolicy, Statements: []*api.Statement{{
		Name:       keepNHStatement,
		Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: keepNHSet}},
		// No route action: evaluation goes on to the default (accept).
		Actions: &api.Actions{RouteAction: api.RouteAction_NONE, Nexthop: &api.NexthopAction{Unchanged: true}},
	}}}
	if err := r.srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
		return fmt.Errorf("creating policy %s: %w", keepNHPolicy, err)
	}
	as := &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_EXPORT,
		Policies: []*api.Policy{{Name: keepNHPolicy}}, DefaultAction: api.RouteAction_ACCEPT,
	}
	if err := r.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: as}); err != nil {
		return fmt.Errorf("assigning export policy %s: %w", keepNHPolicy, err)
	}
	return nil
}

// keepNextHopChanges reports whether peer's membership of the set would
// change.
func (r *Router) keepNextHopChanges(peer netip.Addr, keep bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keepNH[peer] != keep
}

// setKeepNextHop adds peer to, or removes it from, the neighbor set. The
// set is changed in place (GoBGP's policy holds it by reference).
func (r *Router) setKeepNextHop(ctx context.Context, peer netip.Addr, keep bool) error {
	r.mu.Lock()
	had := r.keepNH[peer]
	r.mu.Unlock()
	if had == keep {
		return nil
	}
	set := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: keepNHSet, List: []string{netip.PrefixFrom(peer, peer.BitLen()).String()}}
	var err error
	if keep {
		err = r.srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set})
	} else {
		err = r.srv.DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set})
	}
	if err != nil {
		return fmt.Errorf("keepOriginalNextHop=%v for %s: %w", keep, peer, err)
	}
	r.mu.Lock()
	if keep {
		r.keepNH[peer] = true
	} else {
		delete(r.keepNH, peer)
	}
	r.mu.Unlock()
	return nil
}
