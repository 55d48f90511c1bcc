package gobgp

import (
	"context"
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/palisade-net/palisade/node/bgp/routepolicy"
)

// Names of the GoBGP policies the compiled route policy is installed as,
// assigned globally (GoBGP applies global policies to every session; a
// statement's neighbour set names the session).
const (
	exportPolicy = "palisade-export"
	importPolicy = "palisade-import"
)

// installPolicy sets the route policy before any session exists and
// assigns it, once, when the speaker starts.
func (r *Router) installPolicy(ctx context.Context, p routepolicy.Policy) error {
	if err := r.setPolicies(ctx, p); err != nil {
		return err
	}
	for _, a := range []*api.PolicyAssignment{
		{Name: "global", Direction: api.PolicyDirection_EXPORT, Policies: []*api.Policy{{Name: exportPolicy}}, DefaultAction: routeAction(routepolicy.ExportDefault)},
		{Name: "global", Direction: api.PolicyDirection_IMPORT, Policies: []*api.Policy{{Name: importPolicy}}, DefaultAction: routeAction(routepolicy.ImportDefault)},
	} {
		if err := r.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: a}); err != nil {
			return fmt.Errorf("assigning %s policy %s: %w", a.Direction, a.Policies[0].Name, err)
		}
	}
	r.mu.Lock()
	r.policy = p
	r.mu.Unlock()
	return nil
}

// SetPolicy implements router.Router: the new rules replace the old ones;
// sessions whose exports changed are sent their routes again (soft reset
// out), or, when some may have to be withdrawn, made again (GoBGP's soft
// reset sends only what is now accepted; graceful restart keeps the
// peer's copy of the rest until End-of-RIB); imports are evaluated again
// when they changed.
func (r *Router) SetPolicy(ctx context.Context, p routepolicy.Policy) error {
	r.mu.Lock()
	old := r.policy
	r.mu.Unlock()
	if policyEqual(old, p) {
		return nil
	}
	if err := r.setPolicies(ctx, p); err != nil {
		return err
	}
	r.mu.Lock()
	r.policy = p
	r.mu.Unlock()
	changed, losing := routepolicy.ChangedPeers(old, p)
	hard := map[netip.Addr]bool{}
	for _, a := range losing {
		hard[a] = true
		r.log.WithField("peer", a).Info("BGPFilter export rules withdraw routes: making the session again")
		_ = r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Communication: "BGPFilter changed"})
	}
	for _, a := range changed {
		if !hard[a] {
			_ = r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_OUT})
		}
	}
	if len(changed) == 0 {
		// Statements every session shares changed (next hops kept, the
		// reflection set): everyone gets its routes again.
		_ = r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: "all", Soft: true, Direction: api.ResetPeerRequest_OUT})
	}
	if !statementsEqual(old.Import, p.Import) {
		_ = r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: "all", Soft: true, Direction: api.ResetPeerRequest_IN})
	}
	// A client session that got a BGPFilter (or lost its last one) moves
	// between the fast path and GoBGP.
	r.rebalance(ctx)
	return nil
}

// setPolicies replaces GoBGP's defined sets and policies with p.
func (r *Router) setPolicies(ctx context.Context, p routepolicy.Policy) error {
	req := &api.SetPoliciesRequest{Policies: []*api.Policy{
		{Name: exportPolicy, Statements: statements(p.Export)},
		{Name: importPolicy, Statements: statements(p.Import)},
	}}
	for _, s := range p.PrefixSets {
		req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: s.Name,
			Prefixes: []*api.Prefix{{IpPrefix: s.Prefix.String(), MaskLengthMin: uint32(s.MinLen), MaskLengthMax: uint32(s.MaxLen)}}})
	}
	for _, s := range p.NeighborSets {
		ds := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: s.Name}
		for _, a := range s.Addresses {
			ds.List = append(ds.List, netip.PrefixFrom(a, a.BitLen()).String())
		}
		req.DefinedSets = append(req.DefinedSets, ds)
	}
	if err := r.srv.SetPolicies(ctx, req); err != nil {
		return fmt.Errorf("setting the route policy: %w", err)
	}
	return nil
}

// statements converts compiled statements into GoBGP's.
func statements(ss []routepolicy.Statement) []*api.Statement {
	out := make([]*api.Statement, 0, len(ss))
	for _, s := range ss {
		c := &api.Conditions{}
		switch s.Family {
		case routepolicy.IPv4:
			c.AfiSafiIn = []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}
		case routepolicy.IPv6:
			c.AfiSafiIn = []*api.Family{{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}}
		}
		if s.Neighbors != "" {
			c.NeighborSet = &api.MatchSet{Type: api.MatchSet_ANY, Name: s.Neighbors}
		}
		if s.Prefixes != "" {
			t := api.MatchSet_ANY
			if s.NotPrefixes {
				t = api.MatchSet_INVERT
			}
			c.PrefixSet = &api.MatchSet{Type: t, Name: s.Prefixes}
		}
		switch s.Source {
		case routepolicy.SourceLocal:
			c.RouteType = api.Conditions_ROUTE_TYPE_LOCAL
		case routepolicy.SourceInternal:
			c.RouteType = api.Conditions_ROUTE_TYPE_INTERNAL
		case routepolicy.SourceExternal:
			c.RouteType = api.Conditions_ROUTE_TYPE_EXTERNAL
		}
		for _, p := range s.NextHopIn {
			c.NextHopInList = append(c.NextHopInList, p.String())
		}
		a := &api.Actions{RouteAction: routeAction(s.Action)}
		if s.KeepNextHop {
			a.Nexthop = &api.NexthopAction{Unchanged: true}
		}
		if s.SelfNextHop {
			a.Nexthop = &api.NexthopAction{Self: true}
		}
		out = append(out, &api.Statement{Name: s.Name, Conditions: c, Actions: a})
	}
	return out
}

func routeAction(a routepolicy.Action) api.RouteAction {
	switch a {
	case routepolicy.ActionAccept:
		return api.RouteAction_ACCEPT
	case routepolicy.ActionReject:
		return api.RouteAction_REJECT
	}
	return api.RouteAction_NONE
}

func policyEqual(a, b routepolicy.Policy) bool {
	return fmt.Sprint(a.PrefixSets) == fmt.Sprint(b.PrefixSets) && fmt.Sprint(a.NeighborSets) == fmt.Sprint(b.NeighborSets) &&
		statementsEqual(a.Export, b.Export) && statementsEqual(a.Import, b.Import)
}

func statementsEqual(a, b []routepolicy.Statement) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}
