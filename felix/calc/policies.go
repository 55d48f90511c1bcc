package calc

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/selector"
)

// defaultTierOrder is the order of the default tier when no Tier resource
// gives one, as in Calico.
const defaultTierOrder = 1_000_000

// localEndpoint is an endpoint of this node.
type localEndpoint struct {
	id       EndpointID
	it       *item
	iface    string
	mac      string
	profiles []string
	host     bool
	// spoof are the workload's allowSpoofedSourcePrefixes.
	spoof []netip.Prefix
	// ipNATs is the workload's ipNATs (floating IPs).
	ipNATs   []NAT
	policies map[datastore.Key]*policyInfo
}

// policyInfo is a policy as the resolver keeps it.
type policyInfo struct {
	key                             datastore.Key
	id                              PolicyID
	order                           *float64
	sel, nsSel, saSel               *selector.Selector
	nsGlobal                        bool
	namespace                       string
	ingress, egress                 bool
	doNotTrack, preDNAT, applyOnFwd bool
	inRules, outRules               []v3.Rule
	matches                         map[EndpointID]*localEndpoint
	// compiled and setIDs are set while the policy is active.
	compiled *Policy
	setIDs   []string
}

type tierInfo struct {
	order         *float64
	defaultAction Action
}

type profileInfo struct {
	profile  *v3.Profile
	users    map[EndpointID]struct{}
	compiled *Profile
	setIDs   []string
}

// policyResolver is the stage that works out which policies and profiles
// apply to each local endpoint, keeps the active ones compiled (holding
// references on their IP sets) and builds the endpoints' tier lists.
type policyResolver struct {
	labels   *labelIndex
	compiler *ruleCompiler
	out      *sequencer

	tiers     map[string]*tierInfo
	policies  map[datastore.Key]*policyInfo
	profiles  map[string]*profileInfo
	endpoints map[EndpointID]*localEndpoint

	// peering decides which workloads are local BGP peers.
	peering *localPeering

	dirtyEndpoints   map[EndpointID]struct{}
	dirtyPolicies    map[PolicyID]*policyInfo
	dirtyProfiles    map[string]struct{}
	policyRemovals   map[PolicyID]struct{}
	profileRemovals  map[string]struct{}
	endpointRemovals map[EndpointID]struct{}
	// gapsLogged is, per policy or profile, the unenforceable rules last
	// logged (warnGaps).
	gapsLogged map[string]string
	// spoofAllowed is FelixConfiguration workloadSourceSpoofing: Any;
	// without it allowSpoofedSourcePrefixes are left out and each
	// endpoint that has some is named in a warning, once (spoofWarned).
	spoofAllowed bool
	spoofWarned  map[EndpointID]bool
	// floating says whether ipNATs are programmed (FelixConfiguration
	// floatingIPs Enabled, not the eBPF dataplane); when not, each
	// endpoint with ipNATs is named once in a warning saying why
	// (floatingWhy; natWarned).
	floating    bool
	floatingWhy string
	natWarned   map[EndpointID]bool
}

func newPolicyResolver(labels *labelIndex, compiler *ruleCompiler, out *sequencer) *policyResolver {
	return &policyResolver{
		labels: labels, compiler: compiler, out: out,
		tiers:            map[string]*tierInfo{},
		policies:         map[datastore.Key]*policyInfo{},
		profiles:         map[string]*profileInfo{},
		endpoints:        map[EndpointID]*localEndpoint{},
		dirtyEndpoints:   map[EndpointID]struct{}{},
		dirtyPolicies:    map[PolicyID]*policyInfo{},
		dirtyProfiles:    map[string]struct{}{},
		policyRemovals:   map[PolicyID]struct{}{},
		profileRemovals:  map[string]struct{}{},
		endpointRemovals: map[EndpointID]struct{}{},
		gapsLogged:       map[string]string{},
		spoofWarned:      map[EndpointID]bool{},
		natWarned:        map[EndpointID]bool{},
	}
}

// appliesTo reports whether a policy selects a local endpoint.
func (p *policyInfo) appliesTo(ep *localEndpoint) bool {
	it := ep.it
	if (p.preDNAT || p.doNotTrack) && !ep.host {
		return false
	}
	if p.namespace != "" && (!it.namespaced || it.ns != p.namespace) {
		return false
	}
	if p.nsGlobal && it.namespaced {
		return false
	}
	if p.nsSel != nil && (!it.namespaced || !p.nsSel.Evaluate(it.idx.nsLabels[it.ns])) {
		return false
	}
	if p.saSel != nil && (it.sa == "" || !p.saSel.Evaluate(it.idx.saLabels[it.ns+"/"+it.sa])) {
		return false
	}
	return p.sel == nil || p.sel.EvaluateLabels(it)
}

func (r *policyResolver) newPolicyInfo(k datastore.Key, res v3.Resource) *policyInfo {
	p := &policyInfo{key: k, matches: map[EndpointID]*localEndpoint{}}
	var tier, sel, saSel, nsSel string
	var types []v3.PolicyType
	switch x := res.(type) {
	case *v3.NetworkPolicy:
		s := x.Spec
		tier, sel, saSel, types = s.Tier, s.Selector, s.ServiceAccountSelector, s.Types
		p.order, p.inRules, p.outRules, p.namespace = s.Order, s.Ingress, s.Egress, k.Namespace
	case *v3.GlobalNetworkPolicy:
		s := x.Spec
		tier, sel, saSel, nsSel, types = s.Tier, s.Selector, s.ServiceAccountSelector, s.NamespaceSelector, s.Types
		p.order, p.inRules, p.outRules = s.Order, s.Ingress, s.Egress
		p.doNotTrack, p.preDNAT, p.applyOnFwd = s.DoNotTrack, s.PreDNAT, s.ApplyOnForward
	}
	if tier == "" {
		tier = v3.DefaultTierName
	}
	p.id = PolicyID{Tier: tier, Namespace: p.namespace, Name: k.Name}
	var ok bool
	if p.sel, ok = r.compiler.parse(sel); !ok && sel != "" {
		p.sel = selector.MustParse("!all()")
	}
	p.saSel, _ = r.compiler.parse(saSel)
	if s, _ := r.compiler.parse(nsSel); s != nil {
		if s.IsGlobal() {
			p.nsGlobal = true
		} else {
			p.nsSel = s
		}
	}
	if len(types) == 0 {
		switch {
		case len(p.inRules) > 0 && len(p.outRules) > 0:
			types = []v3.PolicyType{v3.PolicyTypeIngress, v3.PolicyTypeEgress}
		case len(p.outRules) > 0:
			types = []v3.PolicyType{v3.PolicyTypeEgress}
		default:
			types = []v3.PolicyType{v3.PolicyTypeIngress}
		}
	}
	for _, t := range types {
		switch t {
		case v3.PolicyTypeIngress:
			p.ingress = true
		case v3.PolicyTypeEgress:
			p.egress = true
		}
	}
	return p
}

func (r *policyResolver) onPolicy(k datastore.Key, res v3.Resource) {
	old := r.policies[k]
	var np *policyInfo
	if res != nil {
		np = r.newPolicyInfo(k, res)
	}
	if np == nil && old != nil && len(r.gapsLogged) > 0 {
		delete(r.gapsLogged, "policy "+old.id.Tier+"/"+old.id.String())
	}
	if old != nil {
		for id, ep := range old.matches {
			delete(ep.policies, k)
			r.dirtyEndpoints[id] = struct{}{}
		}
		delete(r.policies, k)
	}
	if np != nil {
		r.policies[k] = np
		for id, ep := range r.endpoints {
			if np.appliesTo(ep) {
				np.matches[id] = ep
				ep.policies[k] = np
				r.dirtyEndpoints[id] = struct{}{}
			}
		}
		if len(np.matches) > 0 {
			r.activate(np)
		}
	}
	if old != nil && old.compiled != nil {
		r.deactivate(old, np == nil || np.compiled == nil || np.id != old.id)
	}
}

// compilePolicy compiles a policy's rules: the Policy the dataplane gets,
// the specs of the IP sets it refers to, and the compiler's notes.
func (r *policyResolver) compilePolicy(p *policyInfo) (*Policy, []*ipSetSpec, []ruleNote) {
	in, inSpecs, inNotes := r.compiler.compile(p.inRules, p.namespace, "ingress")
	outRules, outSpecs, outNotes := r.compiler.compile(p.outRules, p.namespace, "egress")
	return &Policy{
		ID: p.id, Order: p.order, Inbound: in, Outbound: outRules, Ingress: p.ingress, Egress: p.egress,
		DoNotTrack: p.doNotTrack, PreDNAT: p.preDNAT, ApplyOnForward: p.applyOnFwd,
	}, append(inSpecs, outSpecs...), append(inNotes, outNotes...)
}

// compileProfile compiles a profile's rules, as compilePolicy.
func (r *policyResolver) compileProfile(name string, p *v3.Profile) (*Profile, []*ipSetSpec, []ruleNote) {
	in, inSpecs, inNotes := r.compiler.compile(p.Spec.Ingress, "", "ingress")
	out, outSpecs, outNotes := r.compiler.compile(p.Spec.Egress, "", "egress")
	return &Profile{Name: name, Inbound: in, Outbound: out}, append(inSpecs, outSpecs...), append(inNotes, outNotes...)
}

// activate compiles a policy and takes references on its IP sets.
func (r *policyResolver) activate(p *policyInfo) {
	compiled, specs, notes := r.compilePolicy(p)
	if len(notes) > 0 || len(r.gapsLogged) > 0 {
		r.warnGaps(log.Fields{"policy": p.id.String(), "tier": p.id.Tier}, "policy "+p.id.Tier+"/"+p.id.String(), gapTexts(notes))
	}
	p.compiled = compiled
	p.setIDs = p.setIDs[:0]
	for _, s := range specs {
		r.labels.ref(s)
		p.setIDs = append(p.setIDs, s.id)
	}
	r.dirtyPolicies[p.id] = p
	delete(r.policyRemovals, p.id)
}

// deactivate drops a policy's IP set references; remove says its ID is
// no longer sent.
func (r *policyResolver) deactivate(p *policyInfo, remove bool) {
	for _, id := range p.setIDs {
		r.labels.unref(id)
	}
	p.setIDs, p.compiled = nil, nil
	if remove {
		if r.dirtyPolicies[p.id] == p {
			delete(r.dirtyPolicies, p.id)
		}
		if r.out.sentPolicies[p.id] {
			r.policyRemovals[p.id] = struct{}{}
		}
	}
}

func (r *policyResolver) onTier(name string, t *v3.Tier) {
	if t == nil {
		delete(r.tiers, name)
	} else {
		ti := &tierInfo{order: t.Spec.Order, defaultAction: Deny}
		if t.Spec.DefaultAction != nil && *t.Spec.DefaultAction == v3.Pass {
			ti.defaultAction = Pass
		}
		r.tiers[name] = ti
	}
	for id, ep := range r.endpoints {
		for _, p := range ep.policies {
			if p.id.Tier == name {
				r.dirtyEndpoints[id] = struct{}{}
				break
			}
		}
	}
}

// setEndpoint adds, replaces or (nil) removes a local endpoint.
func (r *policyResolver) setEndpoint(id EndpointID, ep *localEndpoint) {
	old := r.endpoints[id]
	if old == nil && ep == nil {
		return
	}
	var touched []*policyInfo
	if old != nil {
		for _, p := range old.policies {
			delete(p.matches, id)
			touched = append(touched, p)
		}
		for _, name := range old.profiles {
			r.profileUsers(name, id, false)
		}
		delete(r.endpoints, id)
	}
	if ep == nil {
		delete(r.dirtyEndpoints, id)
		delete(r.spoofWarned, id)
		delete(r.natWarned, id)
		if r.out.sentEndpoints[id] {
			r.endpointRemovals[id] = struct{}{}
		}
	} else {
		delete(r.endpointRemovals, id)
		ep.policies = map[datastore.Key]*policyInfo{}
		r.endpoints[id] = ep
		for k, p := range r.policies {
			if p.appliesTo(ep) {
				ep.policies[k] = p
				p.matches[id] = ep
				if p.compiled == nil {
					r.activate(p)
				}
			}
		}
		for _, name := range ep.profiles {
			r.profileUsers(name, id, true)
		}
		r.dirtyEndpoints[id] = struct{}{}
	}
	for _, p := range touched {
		if len(p.matches) == 0 && p.compiled != nil {
			r.deactivate(p, true)
		}
	}
}

// labelsChanged rematches the local endpoints whose labels may have
// changed through a profile or namespace.
func (r *policyResolver) labelsChanged(affects func(*item) bool) {
	for _, id := range slices.Collect(maps.Keys(r.endpoints)) {
		ep := r.endpoints[id]
		if affects(ep.it) {
			r.setEndpoint(id, &localEndpoint{id: id, it: ep.it, iface: ep.iface, mac: ep.mac, profiles: ep.profiles, host: ep.host, spoof: ep.spoof, ipNATs: ep.ipNATs})
		}
	}
}

func (r *policyResolver) profileUsers(name string, id EndpointID, add bool) {
	pi := r.profiles[name]
	if pi == nil {
		if !add {
			return
		}
		pi = &profileInfo{users: map[EndpointID]struct{}{}}
		r.profiles[name] = pi
	}
	if add {
		pi.users[id] = struct{}{}
	} else {
		delete(pi.users, id)
	}
	r.profileActivity(name, pi, false)
}

func (r *policyResolver) onProfile(name string, p *v3.Profile) {
	pi := r.profiles[name]
	if pi == nil {
		if p == nil {
			return
		}
		pi = &profileInfo{users: map[EndpointID]struct{}{}}
		r.profiles[name] = pi
	}
	existed := pi.profile != nil
	pi.profile = p
	r.profileActivity(name, pi, true)
	if existed != (p != nil) {
		for id := range pi.users {
			r.dirtyEndpoints[id] = struct{}{}
		}
	}
}

// profileActivity compiles or drops a profile as it gains or loses users
// or its rules change.
func (r *policyResolver) profileActivity(name string, pi *profileInfo, changed bool) {
	want := pi.profile != nil && len(pi.users) > 0
	if want && (pi.compiled == nil || changed) {
		compiled, specs, notes := r.compileProfile(name, pi.profile)
		if len(notes) > 0 || len(r.gapsLogged) > 0 {
			r.warnGaps(log.Fields{"profile": name}, "profile "+name, gapTexts(notes))
		}
		oldSets := pi.setIDs
		pi.setIDs = nil
		for _, s := range specs {
			r.labels.ref(s)
			pi.setIDs = append(pi.setIDs, s.id)
		}
		for _, id := range oldSets {
			r.labels.unref(id)
		}
		pi.compiled = compiled
		r.dirtyProfiles[name] = struct{}{}
		delete(r.profileRemovals, name)
	}
	if !want && pi.compiled != nil {
		for _, id := range pi.setIDs {
			r.labels.unref(id)
		}
		pi.setIDs, pi.compiled = nil, nil
		delete(r.dirtyProfiles, name)
		if r.out.sentProfiles[name] {
			r.profileRemovals[name] = struct{}{}
		}
	}
	if pi.profile == nil && len(pi.users) == 0 {
		delete(r.profiles, name)
	}
	if pi.profile == nil && len(r.gapsLogged) > 0 {
		delete(r.gapsLogged, "profile "+name)
	}
}

// warnGaps logs, once per policy or profile (key) and again only when
// they change, the rules with fields felix cannot enforce.
func (r *policyResolver) warnGaps(fields log.Fields, key string, notes []string) {
	text := strings.Join(notes, "; ")
	if r.gapsLogged[key] == text {
		return
	}
	if text == "" {
		delete(r.gapsLogged, key)
		return
	}
	r.gapsLogged[key] = text
	for _, n := range notes {
		log.WithFields(fields).Warn("Rule not enforced as written: " + n)
	}
}

// flush sends policies, profiles, endpoints and routes, then removals.
func (r *policyResolver) flush(dp Dataplane) {
	for _, id := range sortedPolicyIDs(maps.Keys(r.dirtyPolicies)) {
		p := r.dirtyPolicies[id]
		if p.compiled == nil {
			continue
		}
		dp.OnPolicyUpdate(clonePolicy(p.compiled))
		r.out.sentPolicies[id] = true
	}
	clear(r.dirtyPolicies)
	for _, name := range slices.Sorted(maps.Keys(r.dirtyProfiles)) {
		if pi := r.profiles[name]; pi != nil && pi.compiled != nil {
			c := *pi.compiled
			dp.OnProfileUpdate(&c)
			r.out.sentProfiles[name] = true
		}
	}
	clear(r.dirtyProfiles)
	for _, id := range sortedEndpointIDs(maps.Keys(r.dirtyEndpoints)) {
		ep := r.endpoints[id]
		if ep == nil {
			continue
		}
		e := r.buildEndpoint(ep)
		dp.OnEndpointUpdate(e)
		r.out.sentEndpoints[id] = true
		var routes []Route
		if !ep.host && ep.iface != "" {
			for _, n := range append(slices.Clone(e.IPv4Nets), e.IPv6Nets...) {
				routes = append(routes, Route{Dst: n, Iface: ep.iface})
			}
			// A floating IP is routed to its workload too, as Calico
			// does: traffic the host sends to it (DNAT'd in nat OUTPUT,
			// after routing) and BGP's next hop resolve to the workload.
			for _, n := range e.IPNATs {
				routes = append(routes, Route{Dst: netip.PrefixFrom(n.External, n.External.BitLen()), Iface: ep.iface})
			}
		}
		r.out.setEndpointRoutes(id, routes)
	}
	clear(r.dirtyEndpoints)
	for _, id := range sortedEndpointIDs(maps.Keys(r.endpointRemovals)) {
		r.out.setEndpointRoutes(id, nil)
	}
	r.out.flushRoutes(dp)
	for _, id := range sortedEndpointIDs(maps.Keys(r.endpointRemovals)) {
		dp.OnEndpointRemoved(id)
		delete(r.out.sentEndpoints, id)
	}
	clear(r.endpointRemovals)
	for _, id := range sortedPolicyIDs(maps.Keys(r.policyRemovals)) {
		dp.OnPolicyRemoved(id)
		delete(r.out.sentPolicies, id)
	}
	clear(r.policyRemovals)
	for _, name := range slices.Sorted(maps.Keys(r.profileRemovals)) {
		dp.OnProfileRemoved(name)
		delete(r.out.sentProfiles, name)
	}
	clear(r.profileRemovals)
}

// servicesSynced compiles again the active policies and profiles with
// rules naming a Service, which failed closed until the EndpointSlices
// were read.
func (r *policyResolver) servicesSynced() {
	for _, p := range r.policies {
		if p.compiled == nil || !namesService(p.inRules) && !namesService(p.outRules) {
			continue
		}
		old := slices.Clone(p.setIDs)
		r.activate(p)
		for _, id := range old {
			r.labels.unref(id)
		}
	}
	for name, pi := range r.profiles {
		if pi.compiled != nil && (namesService(pi.profile.Spec.Ingress) || namesService(pi.profile.Spec.Egress)) {
			r.profileActivity(name, pi, true)
		}
	}
}

// namesService reports whether a rule names a Service.
func namesService(rules []v3.Rule) bool {
	return slices.ContainsFunc(rules, func(r v3.Rule) bool { return r.Source.Services != nil || r.Destination.Services != nil })
}

// setSpoofAllowed follows workloadSourceSpoofing: the endpoints with
// allowSpoofedSourcePrefixes are sent again when it changes.
func (r *policyResolver) setSpoofAllowed(allowed bool) {
	if allowed == r.spoofAllowed {
		return
	}
	r.spoofAllowed = allowed
	clear(r.spoofWarned)
	for id, ep := range r.endpoints {
		if len(ep.spoof) > 0 {
			r.dirtyEndpoints[id] = struct{}{}
		}
	}
}

// setFloating follows floatingIPs (and the dataplane): the endpoints
// with ipNATs are sent again when it changes.
func (r *policyResolver) setFloating(on bool, why string) {
	if on == r.floating && why == r.floatingWhy {
		return
	}
	r.floating, r.floatingWhy = on, why
	clear(r.natWarned)
	for id, ep := range r.endpoints {
		if len(ep.ipNATs) > 0 {
			r.dirtyEndpoints[id] = struct{}{}
		}
	}
}

func (r *policyResolver) buildEndpoint(ep *localEndpoint) *Endpoint {
	e := &Endpoint{ID: ep.id, InterfaceName: ep.iface, MAC: ep.mac}
	switch {
	case len(ep.spoof) == 0:
		delete(r.spoofWarned, ep.id)
	case r.spoofAllowed:
		e.AllowSpoofedSourcePrefixes = slices.Clone(ep.spoof)
	case !r.spoofWarned[ep.id]:
		r.spoofWarned[ep.id] = true
		log.WithFields(log.Fields{"endpoint": ep.id.String(), "allowSpoofedSourcePrefixes": ep.spoof}).
			Warn("allowSpoofedSourcePrefixes ignored: FelixConfiguration workloadSourceSpoofing is not Any, so the workload may send from its own addresses only")
	}
	switch {
	case len(ep.ipNATs) == 0:
		delete(r.natWarned, ep.id)
	case r.floating:
		e.IPNATs = slices.Clone(ep.ipNATs)
	case !r.natWarned[ep.id]:
		r.natWarned[ep.id] = true
		log.WithFields(log.Fields{"endpoint": ep.id.String(), "ipNATs": ep.ipNATs}).
			Warn("WorkloadEndpoint ipNATs (floating IPs) not programmed: " + r.floatingWhy + "; nothing answers at the floating addresses")
	}
	for _, n := range ep.it.nets {
		if n.Addr().Is4() {
			e.IPv4Nets = append(e.IPv4Nets, n)
		} else {
			e.IPv6Nets = append(e.IPv6Nets, n)
		}
	}
	if !ep.host && r.peering != nil {
		e.LocalBGPPeer, e.PeeringAddrs = r.peering.of(ep.it.labels)
	}
	r.fillPolicies(e, ep.host, ep.profiles, maps.Values(ep.policies))
	return e
}

// workloadsChanged sends every local workload again: something that
// decides their local BGP peering changed.
func (r *policyResolver) workloadsChanged() {
	for id, ep := range r.endpoints {
		if !ep.host {
			r.dirtyEndpoints[id] = struct{}{}
		}
	}
}

// fillPolicies gives an endpoint its tiers and the profiles of its list
// that exist, from the policies that select it.
func (r *policyResolver) fillPolicies(e *Endpoint, host bool, profiles []string, pols func(func(*policyInfo) bool)) {
	var normal, fwd, preDNAT, untracked []*policyInfo
	for p := range pols {
		switch {
		case p.doNotTrack:
			untracked = append(untracked, p)
		case p.preDNAT:
			preDNAT = append(preDNAT, p)
		default:
			normal = append(normal, p)
			if host && p.applyOnFwd {
				fwd = append(fwd, p)
			}
		}
	}
	e.Tiers = r.tierList(normal)
	if host {
		e.ForwardTiers, e.PreDNATTiers, e.UntrackedTiers = r.tierList(fwd), r.tierList(preDNAT), r.tierList(untracked)
	}
	for _, name := range profiles {
		if pi := r.profiles[name]; pi != nil && pi.profile != nil {
			e.Profiles = append(e.Profiles, name)
		}
	}
}

// tierList groups policies by tier: tiers by order (none last) then name,
// policies by order (none last) then name.
func (r *policyResolver) tierList(pols []*policyInfo) []TierPolicies {
	if len(pols) == 0 {
		return nil
	}
	slices.SortFunc(pols, func(a, b *policyInfo) int {
		if c := cmpOrder(r.tierOrder(a.id.Tier), r.tierOrder(b.id.Tier)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.id.Tier, b.id.Tier); c != 0 {
			return c
		}
		if c := cmpOrder(a.order, b.order); c != 0 {
			return c
		}
		return cmp.Compare(a.id.String(), b.id.String())
	})
	var out []TierPolicies
	for _, p := range pols {
		if len(out) == 0 || out[len(out)-1].Name != p.id.Tier {
			action := Deny
			if t := r.tiers[p.id.Tier]; t != nil {
				action = t.defaultAction
			}
			out = append(out, TierPolicies{Name: p.id.Tier, DefaultAction: action})
		}
		t := &out[len(out)-1]
		if p.ingress {
			t.Ingress = append(t.Ingress, p.id)
		}
		if p.egress {
			t.Egress = append(t.Egress, p.id)
		}
	}
	return out
}

func (r *policyResolver) tierOrder(name string) *float64 {
	if t := r.tiers[name]; t != nil {
		return t.order
	}
	if name == v3.DefaultTierName {
		o := float64(defaultTierOrder)
		return &o
	}
	return nil
}

func cmpOrder(a, b *float64) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return cmp.Compare(*a, *b)
}

func clonePolicy(p *Policy) *Policy {
	c := *p
	c.Inbound = slices.Clone(p.Inbound)
	c.Outbound = slices.Clone(p.Outbound)
	return &c
}

func sortedPolicyIDs(seq func(func(PolicyID) bool)) []PolicyID {
	return slices.SortedFunc(seq, func(a, b PolicyID) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

func sortedEndpointIDs(seq func(func(EndpointID) bool)) []EndpointID {
	return slices.SortedFunc(seq, func(a, b EndpointID) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}
