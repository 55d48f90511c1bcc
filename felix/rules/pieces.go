package rules

import (
	"cmp"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// The pieces below render part of what Render renders, identically, for a
// dataplane that keeps the ruleset between updates and renders only what
// changed. in gives the config, the IP version and the policies and
// profiles the piece may refer to (an absent one is left out, as in
// Render); in.Config must be set.

// WorkloadChains renders a workload endpoint's cali-tw- and cali-fw-
// chains (filter table); none when it has no interface.
func WorkloadChains(in Input, e *calc.Endpoint) []Chain {
	if e.InterfaceName == "" {
		return nil
	}
	b := newBuilder(in)
	b.add("filter", ChainName(PrefixToWorkload, e.InterfaceName), b.endpointChain(e.Tiers, e.Profiles, true, "", true))
	b.add("filter", ChainName(PrefixFromWorkload, e.InterfaceName), b.endpointChain(e.Tiers, e.Profiles, false, "", true))
	return b.tables["filter"]
}

// FilterPolicyChains renders the filter chains (cali-pi-, cali-po-) of a
// policy that is neither doNotTrack nor preDNAT.
func FilterPolicyChains(in Input, p *calc.Policy) []Chain {
	b := newBuilder(in)
	if p.Ingress {
		b.add("filter", PolicyChain(p.ID, true), b.ruleChain(p.Inbound, "ALLOW"))
	}
	if p.Egress {
		b.add("filter", PolicyChain(p.ID, false), b.ruleChain(p.Outbound, "ALLOW"))
	}
	return b.tables["filter"]
}

// ProfileChains renders a profile's filter chains (cali-pri-, cali-pro-).
func ProfileChains(in Input, p *calc.Profile) []Chain {
	b := newBuilder(in)
	b.add("filter", ProfileChain(p.Name, true), b.ruleChain(p.Inbound, "ALLOW"))
	b.add("filter", ProfileChain(p.Name, false), b.ruleChain(p.Outbound, "ALLOW"))
	return b.tables["filter"]
}

// DispatchChains renders the workload dispatch chains (cali-from-wl-dispatch,
// cali-to-wl-dispatch and their sub-chains) for the workload interfaces,
// sorted. With a cache, a sub-tree whose interfaces are those of the
// cache's last render is taken from it, not built and hashed again: a new
// pod changes one branch of each tree.
func DispatchChains(in Input, ifaces []string, cache *DispatchCache) []Chain {
	b := newBuilder(in)
	if cache != nil {
		b.dispatchSeen, b.dispatchNext = cache.trees, map[string]dispatchTree{}
	}
	b.dispatch(ChainFromWlDispatch, ChainFromWlDispatch, "-i", PrefixFromWorkload, ifaces, 0)
	b.dispatch(ChainToWlDispatch, ChainToWlDispatch, "-o", PrefixToWorkload, ifaces, 0)
	if cache != nil {
		cache.trees = b.dispatchNext
	}
	return b.tables["filter"]
}

// DispatchCache holds the dispatch trees of the last render, by the name
// of the chain at their top.
type DispatchCache struct {
	trees map[string]dispatchTree
}

// dispatchTree is a dispatch chain and every chain under it, as rendered
// for ifaces starting at depth.
type dispatchTree struct {
	ifaces []string
	depth  int
	chains []Chain
}

// IsDispatchChain reports whether a chain is one of the workload dispatch
// chains.
func IsDispatchChain(name string) bool {
	return strings.HasPrefix(name, ChainFromWlDispatch) || strings.HasPrefix(name, ChainToWlDispatch)
}

// RPFSkipChain renders cali-rpf-skip (raw table) from the workload
// endpoints that have allowSpoofedSourcePrefixes (others add nothing).
func RPFSkipChain(in Input, workloads []*calc.Endpoint) Chain {
	sorted := slices.SortedFunc(slices.Values(workloads), func(a, b *calc.Endpoint) int { return cmp.Compare(a.InterfaceName, b.InterfaceName) })
	rules := rpfSkipRules(sorted, in.IPVersion)
	hashRules(ChainRPFSkip, rules)
	return Chain{Name: ChainRPFSkip, Rules: rules}
}

// IsFloatingChain reports whether a chain is cali-fip-dnat or
// cali-fip-snat.
func IsFloatingChain(name string) bool { return name == ChainFIPDNAT || name == ChainFIPSNAT }

// FloatingChains renders cali-fip-dnat and cali-fip-snat (nat table)
// from the IPNATs of the workload endpoints of the family.
func FloatingChains(in Input, workloads []*calc.Endpoint) []Chain {
	dnat, snat := floatingRules(workloads, in.IPVersion)
	hashRules(ChainFIPDNAT, dnat)
	hashRules(ChainFIPSNAT, snat)
	return []Chain{{Name: ChainFIPDNAT, Rules: dnat}, {Name: ChainFIPSNAT, Rules: snat}}
}
