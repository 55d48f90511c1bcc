package dataplane

import (
	"maps"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
)

// renderer renders one family's ruleset incrementally. rules.Render is
// pure and renders everything; with 1,000 endpoints that is tens of
// thousands of hashed rules per apply. The renderer calls it on small
// inputs instead and keeps the pieces:
//   - the base (entry chains, host endpoint dispatch, failsafe, NAT,
//     jumps), from the host endpoints reduced to their interfaces,
//     rendered again only when a host endpoint comes, goes or changes
//     interface, or the config changes;
//   - the workload dispatch, rendered again when a workload endpoint
//     comes, goes or changes interface;
//   - cali-rpf-skip and the floating IP chains, rendered again when a
//     workload with spoofed prefixes (with IPNATs) comes, goes or
//     changes them;
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
	// dispatch is the workload dispatch, rendered apart from the base.
	dispatch      []rules.Chain
	dispatchDirty bool
	dispatchCache rules.DispatchCache // emptied with the configuration
	// rpfSkip is cali-rpf-skip (raw), rendered apart from the base from
	// the workloads with allowSpoofedSourcePrefixes (spoofers).
	rpfSkip      rules.Chain
	rpfSkipDirty bool
	spoofers     map[calc.EndpointID]*calc.Endpoint
	// fip is cali-fip-dnat and cali-fip-snat (nat), rendered apart from
	// the base from the workloads with IPNATs (natters).
	fip       []rules.Chain
	fipDirty  bool
	natters   map[calc.EndpointID]*calc.Endpoint
	endpoints map[calc.EndpointID]*epRender
	policies  map[calc.PolicyID]*itemRender[*calc.Policy]
	profiles  map[string]*itemRender[*calc.Profile]
	// The endpoints rendered with each policy and profile (present or
	// not): rendered again when it changes.
	policyUsers  map[calc.PolicyID]map[calc.EndpointID]struct{}
	profileUsers map[string]map[calc.EndpointID]struct{}
	// sizes are the chain counts per table of the last result.
	sizes map[string]int
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

func newRenderer(version int) *renderer {
	return &renderer{version: version, baseDirty: true, rpfSkipDirty: true, fipDirty: true, spoofers: map[calc.EndpointID]*calc.Endpoint{},
		natters: map[calc.EndpointID]*calc.Endpoint{}, endpoints: map[calc.EndpointID]*epRender{},
		policies: map[calc.PolicyID]*itemRender[*calc.Policy]{}, profiles: map[string]*itemRender[*calc.Profile]{},
		policyUsers: map[calc.PolicyID]map[calc.EndpointID]struct{}{}, profileUsers: map[string]map[calc.EndpointID]struct{}{}, sizes: map[string]int{}}
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
		r.reset(cfg)
	}
	// Policies and profiles first: the endpoints that refer to one that
	// changed are rendered again below.
	stale := map[calc.EndpointID]struct{}{}
	r.renderPolicies(cfg, pols, stale)
	r.renderProfiles(cfg, profs, stale)
	r.renderEndpoints(cfg, pols, profs, eps, stale)
	r.renderBase(cfg, eps)
	r.renderDispatch(cfg, eps)
	r.renderRPFSkip(cfg)
	r.renderFloating(cfg)
	return r.assemble()
}

// reset forgets every rendering: a new configuration renders all again.
func (r *renderer) reset(cfg *calc.Config) {
	r.cfg, r.baseDirty = cfg, true
	clear(r.endpoints)
	clear(r.policies)
	clear(r.profiles)
	clear(r.policyUsers)
	clear(r.profileUsers)
	clear(r.spoofers)
	clear(r.natters)
	r.rpfSkipDirty, r.fipDirty = true, true
}

// markUsers marks the endpoints of users stale.
func markUsers(stale, users map[calc.EndpointID]struct{}) {
	for id := range users {
		stale[id] = struct{}{}
	}
}

// renderPolicies drops the policies gone and renders the new and the
// changed ones, marking their users stale.
func (r *renderer) renderPolicies(cfg *calc.Config, pols map[calc.PolicyID]*calc.Policy, stale map[calc.EndpointID]struct{}) {
	for id := range r.policies {
		if pols[id] == nil {
			delete(r.policies, id)
			markUsers(stale, r.policyUsers[id])
		}
	}
	for id, p := range pols {
		if ir := r.policies[id]; ir != nil && ir.item == p {
			continue
		}
		markUsers(stale, r.policyUsers[id])
		var chains map[string][]rules.Chain
		if p.DoNotTrack || p.PreDNAT {
			rs := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Policies: map[calc.PolicyID]*calc.Policy{id: p},
				Endpoints: map[calc.EndpointID]*calc.Endpoint{stub.ID: stub}})
			chains = pick(rs, isPolicyChain)
		} else {
			chains = map[string][]rules.Chain{"filter": rules.FilterPolicyChains(rules.Input{Config: cfg, IPVersion: r.version}, p)}
		}
		r.policies[id] = &itemRender[*calc.Policy]{item: p, chains: chains}
	}
}

// renderProfiles does the same for the profiles.
func (r *renderer) renderProfiles(cfg *calc.Config, profs map[string]*calc.Profile, stale map[calc.EndpointID]struct{}) {
	for name := range r.profiles {
		if profs[name] == nil {
			delete(r.profiles, name)
			markUsers(stale, r.profileUsers[name])
		}
	}
	for name, p := range profs {
		if ir := r.profiles[name]; ir != nil && ir.item == p {
			continue
		}
		markUsers(stale, r.profileUsers[name])
		r.profiles[name] = &itemRender[*calc.Profile]{item: p,
			chains: map[string][]rules.Chain{"filter": rules.ProfileChains(rules.Input{Config: cfg, IPVersion: r.version}, p)}}
	}
}

// touch notes that an endpoint came, went or changed interface: a
// workload endpoint changes only the dispatch chains; a host endpoint,
// the rest of the base too.
func (r *renderer) touch(id calc.EndpointID) {
	if id.Kind == calc.WorkloadEndpoint {
		r.dispatchDirty = true
	} else {
		r.baseDirty = true
	}
}

// trackSpoofer keeps the workloads with allowSpoofedSourcePrefixes (ep
// nil: gone); cali-rpf-skip is rendered again when one changes.
func (r *renderer) trackSpoofer(id calc.EndpointID, ep *calc.Endpoint) {
	old := r.spoofers[id]
	if ep == nil || id.Kind != calc.WorkloadEndpoint || len(ep.AllowSpoofedSourcePrefixes) == 0 || ep.InterfaceName == "" {
		if old != nil {
			delete(r.spoofers, id)
			r.rpfSkipDirty = true
		}
		return
	}
	if old == nil || old.InterfaceName != ep.InterfaceName || !slices.Equal(old.AllowSpoofedSourcePrefixes, ep.AllowSpoofedSourcePrefixes) {
		r.rpfSkipDirty = true
	}
	r.spoofers[id] = ep
}

// trackNatter keeps the workloads with IPNATs (ep nil: gone); the
// floating IP chains are rendered again when one changes.
func (r *renderer) trackNatter(id calc.EndpointID, ep *calc.Endpoint) {
	old := r.natters[id]
	if ep == nil || id.Kind != calc.WorkloadEndpoint || len(ep.IPNATs) == 0 || ep.InterfaceName == "" {
		if old != nil {
			delete(r.natters, id)
			r.fipDirty = true
		}
		return
	}
	if old == nil || !slices.Equal(old.IPNATs, ep.IPNATs) {
		r.fipDirty = true
	}
	r.natters[id] = ep
}

// renderEndpoints drops the gone, renders the new, the changed and those
// whose policies or profiles changed (stale).
func (r *renderer) renderEndpoints(cfg *calc.Config, pols map[calc.PolicyID]*calc.Policy, profs map[string]*calc.Profile, eps map[calc.EndpointID]*calc.Endpoint, stale map[calc.EndpointID]struct{}) {
	for id, er := range r.endpoints {
		if eps[id] == nil {
			r.forget(id, er)
			delete(r.endpoints, id)
			r.touch(id)
			r.trackSpoofer(id, nil)
			r.trackNatter(id, nil)
		}
	}
	for id, ep := range eps {
		er := r.endpoints[id]
		if er != nil && er.ep == ep {
			if _, ok := stale[id]; !ok {
				continue
			}
		}
		if er == nil || !sameShape(er.ep, ep) {
			r.touch(id)
		}
		r.trackSpoofer(id, ep)
		r.trackNatter(id, ep)
		if er != nil {
			r.forget(id, er)
		}
		p, pr := refs(ep, pols, profs)
		var chains map[string][]rules.Chain
		if id.Kind == calc.WorkloadEndpoint {
			chains = map[string][]rules.Chain{"filter": rules.WorkloadChains(rules.Input{Config: cfg, IPVersion: r.version,
				Policies: present(p), Profiles: present(pr)}, ep)}
		} else {
			rs := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Policies: present(p), Profiles: present(pr),
				Endpoints: map[calc.EndpointID]*calc.Endpoint{id: ep}})
			chains = pick(rs, isEndpointChain)
		}
		er = &epRender{ep: ep, policies: p, profiles: pr, chains: chains}
		r.endpoints[id] = er
		for pid := range p {
			addUser(r.policyUsers, pid, id)
		}
		for name := range pr {
			addUser(r.profileUsers, name, id)
		}
	}
}

// renderBase renders the base (the chains without endpoints', policies',
// the workload dispatch, cali-rpf-skip and the floating IPs') when a host
// endpoint or the configuration changed.
func (r *renderer) renderBase(cfg *calc.Config, eps map[calc.EndpointID]*calc.Endpoint) {
	if r.baseDirty || r.base == nil {
		// The base without the workload dispatch, from the host
		// endpoints' shapes.
		shapes := map[calc.EndpointID]*calc.Endpoint{}
		for id, ep := range eps {
			if id.Kind != calc.WorkloadEndpoint {
				shapes[id] = shape(ep)
			}
		}
		full := rules.Render(rules.Input{Config: cfg, IPVersion: r.version, Endpoints: shapes,
			Policies: map[calc.PolicyID]*calc.Policy{}, Profiles: map[string]*calc.Profile{}})
		r.base = &rules.Ruleset{IPVersion: r.version, Jumps: full.Jumps,
			Tables: pick(full, func(n string) bool {
				return !isEndpointChain(n) && !isPolicyChain(n) && !rules.IsDispatchChain(n) && n != rules.ChainRPFSkip && !rules.IsFloatingChain(n)
			})}
		r.baseDirty, r.dispatchDirty = false, true
		r.dispatchCache = rules.DispatchCache{}
	}
}

// renderDispatch renders the workload dispatch chains when a workload
// interface came or went.
func (r *renderer) renderDispatch(cfg *calc.Config, eps map[calc.EndpointID]*calc.Endpoint) {
	if r.dispatchDirty {
		var ifaces []string
		for id, ep := range eps {
			if id.Kind == calc.WorkloadEndpoint && ep.InterfaceName != "" {
				ifaces = append(ifaces, ep.InterfaceName)
			}
		}
		slices.Sort(ifaces)
		r.dispatch = rules.DispatchChains(rules.Input{Config: cfg, IPVersion: r.version}, ifaces, &r.dispatchCache)
		r.dispatchDirty = false
	}
}

// renderRPFSkip renders cali-rpf-skip when a spoofing workload changed.
func (r *renderer) renderRPFSkip(cfg *calc.Config) {
	if r.rpfSkipDirty {
		r.rpfSkip = rules.RPFSkipChain(rules.Input{Config: cfg, IPVersion: r.version}, slices.Collect(maps.Values(r.spoofers)))
		r.rpfSkipDirty = false
	}
}

// renderFloating renders the floating IP chains when a workload's IPNATs
// changed.
func (r *renderer) renderFloating(cfg *calc.Config) {
	if r.fipDirty {
		r.fip = rules.FloatingChains(rules.Input{Config: cfg, IPVersion: r.version}, slices.Collect(maps.Values(r.natters)))
		r.fipDirty = false
	}
}

// assemble puts the renderings together into one ruleset.
func (r *renderer) assemble() *rules.Ruleset {
	out := &rules.Ruleset{IPVersion: r.version, Jumps: r.base.Jumps, Tables: map[string][]rules.Chain{}}
	for t, cs := range r.base.Tables {
		// Sized as the last result, so appending rarely grows it.
		out.Tables[t] = append(make([]rules.Chain, 0, max(r.sizes[t], len(cs))), cs...)
	}
	out.Tables["filter"] = append(out.Tables["filter"], r.dispatch...)
	out.Tables["raw"] = append(out.Tables["raw"], r.rpfSkip)
	out.Tables["nat"] = append(out.Tables["nat"], r.fip...)
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
	for t, cs := range out.Tables {
		r.sizes[t] = len(cs)
	}
	return out
}

// forget removes an endpoint from the users of what it referred to.
func (r *renderer) forget(id calc.EndpointID, er *epRender) {
	for pid := range er.policies {
		delUser(r.policyUsers, pid, id)
	}
	for name := range er.profiles {
		delUser(r.profileUsers, name, id)
	}
}

func addUser[K comparable](m map[K]map[calc.EndpointID]struct{}, k K, id calc.EndpointID) {
	if m[k] == nil {
		m[k] = map[calc.EndpointID]struct{}{}
	}
	m[k][id] = struct{}{}
}

func delUser[K comparable](m map[K]map[calc.EndpointID]struct{}, k K, id calc.EndpointID) {
	delete(m[k], id)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}
