package dataplane

import (
	"slices"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
)

// renderer renders one family's ruleset incrementally. rules.Render is
// pure and renders everything; with 1,000 endpoints that is tens of
// thousands of hashed rules per apply. The renderer calls it on small
// inputs instead and keeps the pieces:
//   - the base (entry chains, dispatch, failsafe, NAT, jumps), from the
//     endpoints reduced to their interfaces, rendered again only when an
//     endpoint comes, goes or changes interface, or the config changes;
//   - each endpoint's own chains, from the endpoint and the policies and
//     profiles it refers to, rendered again when any of those changes;
//   - each policy's and profile's chains, rendered again when it changes.
//
// The union is what rules.Render returns for the whole input (a test
// checks it), so hashes and chains are the same.
type renderer struct {
	version   int
	cfg       *calc.Config
	base      *rules.Ruleset
	baseDirty bool
	endpoints map[calc.EndpointID]*epRender
	policies  map[calc.PolicyID]*itemRender[*calc.Policy]
	profiles  map[string]*itemRender[*calc.Profile]
}

type epRender struct {
	ep       *calc.Endpoint
	policies map[calc.PolicyID]*calc.Policy
	profiles map[string]*calc.Profile
	chains   map[string][]rules.Chain
}

type itemRender[T comparable] struct {
	item   T
	chains map[string][]rules.Chain
}

// current reports whether the policies and profiles the endpoint refers
// to are the ones it was rendered with (the set of references only changes
// with the endpoint itself).
func (er *epRender) current(pols map[calc.PolicyID]*calc.Policy, profs map[string]*calc.Profile) bool {
	for id, p := range er.policies {
		if pols[id] != p {
			return false
		}
	}
	for name, p := range er.profiles {
		if profs[name] != p {
			return false
		}
	}
	return true
}

func newRenderer(version int) *renderer {
	return &renderer{version: version, baseDirty: true, endpoints: map[calc.EndpointID]*epRender{},
		policies: map[calc.PolicyID]*itemRender[*calc.Policy]{}, profiles: map[string]*itemRender[*calc.Profile]{}}
}

func isPolicyChain(name string) bool {
	for _, p := range []string{rules.PrefixPolicyIn, rules.PrefixPolicyOut, rules.PrefixProfileIn, rules.PrefixProfileOut} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func isEndpointChain(name string) bool {
	for _, p := range []string{rules.PrefixToWorkload, rules.PrefixFromWorkload, rules.PrefixFromHost, rules.PrefixToHost, rules.PrefixFromHostFwd, rules.PrefixToHostFwd} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// pick keeps the chains of rs that keep says are wanted, per table.
func pick(rs *rules.Ruleset, keep func(string) bool) map[string][]rules.Chain {
	out := map[string][]rules.Chain{}
	for t, cs := range rs.Tables {
		for _, c := range cs {
			if keep(c.Name) {
				out[t] = append(out[t], c)
			}
		}
	}
	return out
}

// stub is a host endpoint that makes the renderer emit the raw and mangle
// policy chains (doNotTrack and preDNAT) of a lone policy.
var stub = &calc.Endpoint{ID: calc.EndpointID{Kind: calc.HostEndpoint, Name: "stub"}, InterfaceName: "stub",
	UntrackedTiers: []calc.TierPolicies{{Name: "stub"}}, PreDNATTiers: []calc.TierPolicies{{Name: "stub"}}}

func shape(ep *calc.Endpoint) *calc.Endpoint {
	return &calc.Endpoint{ID: ep.ID, InterfaceName: ep.InterfaceName, UntrackedTiers: ep.UntrackedTiers, PreDNATTiers: ep.PreDNATTiers}
}

func sameShape(a, b *calc.Endpoint) bool {
	return a.InterfaceName == b.InterfaceName && len(a.UntrackedTiers) > 0 == (len(b.UntrackedTiers) > 0) &&
		len(a.PreDNATTiers) > 0 == (len(b.PreDNATTiers) > 0)
}

// refs lists the policies and profiles an endpoint refers to, with their
// current values (nil when absent).
func refs(ep *calc.Endpoint, pols map[calc.PolicyID]*calc.Policy, profs map[string]*calc.Profile) (map[calc.PolicyID]*calc.Policy, map[string]*calc.Profile) {
	p := map[calc.PolicyID]*calc.Policy{}
	for _, tiers := range [][]calc.TierPolicies{ep.Tiers, ep.ForwardTiers, ep.PreDNATTiers, ep.UntrackedTiers} {
		for _, t := range tiers {
			for _, id := range t.Ingress {
				p[id] = pols[id]
			}
			for _, id := range t.Egress {
				p[id] = pols[id]
			}
		}
	}
	pr := map[string]*calc.Profile{}
	for _, name := range ep.Profiles {
		pr[name] = profs[name]
	}
	return p, pr
}

func present[K comparable, V any](m map[K]*V) map[K]*V {
	out := make(map[K]*V, len(m))
	for k, v := range m {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// render returns the ruleset for the current input, re-rendering only
// what changed since the last call.
func (r *renderer) render(cfg *calc.Config, pols map[calc.PolicyID]*calc.Policy, profs map[string]*calc.Profile, eps map[calc.EndpointID]*calc.Endpoint) *rules.Ruleset {
	if cfg != r.cfg {
		r.cfg, r.baseDirty = cfg, true
		clear(r.endpoints)
		clear(r.policies)
		clear(r.profiles)
	}
	// Endpoints: drop the gone, re-render the changed.
	for id := range r.endpoints {
		if eps[id] == nil {
			delete(r.endpoints, id)
			r.baseDirty = true
		}
	}
	for id, ep := range eps {
		er := r.endpoints[id]
		if er != nil && er.ep == ep && er.current(pols, profs) {
			continue
		}
		p, pr := refs(ep, pols, profs)
		if er == nil || !sameShape(er.ep, ep) {
			r.baseDirty = true
		}
		rs := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Policies: present(p), Profiles: present(pr),
			Endpoints: map[calc.EndpointID]*calc.Endpoint{id: ep}})
		r.endpoints[id] = &epRender{ep: ep, policies: p, profiles: pr, chains: pick(rs, isEndpointChain)}
	}
	for id := range r.policies {
		if pols[id] == nil {
			delete(r.policies, id)
		}
	}
	for id, p := range pols {
		if ir := r.policies[id]; ir != nil && ir.item == p {
			continue
		}
		rs := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Policies: map[calc.PolicyID]*calc.Policy{id: p},
			Endpoints: map[calc.EndpointID]*calc.Endpoint{stub.ID: stub}})
		r.policies[id] = &itemRender[*calc.Policy]{item: p, chains: pick(rs, isPolicyChain)}
	}
	for name := range r.profiles {
		if profs[name] == nil {
			delete(r.profiles, name)
		}
	}
	for name, p := range profs {
		if ir := r.profiles[name]; ir != nil && ir.item == p {
			continue
		}
		rs := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Profiles: map[string]*calc.Profile{name: p}})
		r.profiles[name] = &itemRender[*calc.Profile]{item: p, chains: pick(rs, isPolicyChain)}
	}
	if r.baseDirty || r.base == nil {
		shapes := make(map[calc.EndpointID]*calc.Endpoint, len(eps))
		for id, ep := range eps {
			shapes[id] = shape(ep)
		}
		full := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Endpoints: shapes,
			Policies: map[calc.PolicyID]*calc.Policy{}, Profiles: map[string]*calc.Profile{}})
		r.base = &rules.Ruleset{IPVersion: r.version, Jumps: full.Jumps,
			Tables: pick(full, func(n string) bool { return !isEndpointChain(n) && !isPolicyChain(n) })}
		r.baseDirty = false
	}

	out := &rules.Ruleset{IPVersion: r.version, Jumps: r.base.Jumps, Tables: map[string][]rules.Chain{}}
	for t, cs := range r.base.Tables {
		out.Tables[t] = slices.Clone(cs)
	}
	add := func(m map[string][]rules.Chain) {
		for t, cs := range m {
			out.Tables[t] = append(out.Tables[t], cs...)
		}
	}
	// The order of chains in a table does not matter to the table driver.
	for _, er := range r.endpoints {
		add(er.chains)
	}
	for _, ir := range r.policies {
		add(ir.chains)
	}
	for _, ir := range r.profiles {
		add(ir.chains)
	}
	return out
}
