package calc

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// This file answers "why is this packet allowed (or not)?" from the
// graph's own state: which endpoints the packet's ends are, which
// policies select them (the resolver's appliesTo and tierList), what the
// rules compile to (the rule compiler), which IP sets hold the addresses
// (ipSetSpec.matches over the items holding them), and what that means
// for the packet (eval.go), along the path felix/rules renders: the
// source's egress chain, the host endpoints a forwarded packet crosses,
// and the destination's ingress chain, with the host-to-workload and
// workload-to-host special cases. The question and the answer are in
// explain_query.go, the resolution of the ends in explain_ends.go, the
// walk along the path in explain_path.go, the graph of no node that
// explains without a dataplane in explain_graph.go; this file holds the
// explainer, its IP set membership and the policy it compiles.

// endRef is a resolved end.
type endRef struct {
	peer Peer
	addr netip.Addr
	it   *item  // the endpoint (nil for a host without one, or outside)
	key  string // its item key
	// hostEP is the host endpoint that stands for a Host end (a node's
	// address): its "*" endpoint.
	hostEP *item
}

func (e *endRef) isWorkload() bool { return e.it != nil && e.it.kind == itemWorkload }

// hostItem is the host endpoint whose policy a host end applies: the
// endpoint itself, or the "*" one standing for a node's address.
func (e *endRef) hostItem() *item {
	if e.it != nil && e.it.kind == itemHost {
		return e.it
	}
	return e.hostEP
}

// onHost reports whether the end is its node's own host (a host endpoint
// or a node address).
func (e *endRef) onHost() bool {
	return e.peer.Kind == PeerHostEP || e.peer.Kind == PeerHost
}

// Explain evaluates the packet of q against the graph's state. Errors in
// q are ErrBadQuery.
func (g *Graph) Explain(q Query) (*Explanation, error) {
	x := &explainer{g: g, r: g.policies, compiled: map[datastore.Key]*Policy{}, specs: map[string]*ipSetSpec{},
		notes: map[RuleRef][]RuleNote{}, profiles: map[string]*Profile{}, byID: map[PolicyID]*Policy{},
		endpoints: map[*item]*Endpoint{}}
	return x.explain(q)
}

// explainer is one explanation in progress.
type explainer struct {
	g        *Graph
	r        *policyResolver
	compiled map[datastore.Key]*Policy
	byID     map[PolicyID]*Policy
	profiles map[string]*Profile
	specs    map[string]*ipSetSpec
	notes    map[RuleRef][]RuleNote
	holders  map[netip.Addr][]*item
	out      *Explanation
	// endpoints caches what endpoint found.
	endpoints map[*item]*Endpoint
}

func (x *explainer) explain(q Query) (*Explanation, error) {
	if q.Protocol == 0 {
		return nil, badQuery("no protocol")
	}
	// A Service address: the packet is judged on a backend, as the
	// eBPF dataplane's programs translate before policy.
	var svc *ServiceTranslation
	if a, err := netip.ParseAddr(q.To.Address); err == nil {
		if t, be, ok := x.g.translateService(a.Unmap(), q.DstPort, q.Protocol); ok {
			svc = t
			if t.Backend != "" {
				q.To, q.DstPort = End{Address: be.Addr().String()}, be.Port()
			}
		}
	}
	from, err := x.resolve(q.From, q.To, "--from")
	if err != nil {
		return nil, err
	}
	if svc != nil && svc.Backend == "" {
		return &Explanation{From: from.peer, To: Peer{Kind: PeerService, Address: q.To.Address}, Service: svc, Verdict: VerdictDeny,
			Notes: []string{serviceNote(svc)}, Node: x.g.hostname}, nil
	}
	to, err := x.resolve(q.To, q.From, "--to")
	if err != nil {
		return nil, err
	}
	if err := x.pickAddrs(from, to, q); err != nil {
		return nil, err
	}
	if err := x.classify(from, q, "--from"); err != nil {
		return nil, err
	}
	if err := x.classify(to, q, "--to"); err != nil {
		return nil, err
	}
	p := Packet{Src: from.addr, Dst: to.addr, Protocol: q.Protocol}
	switch {
	case ProtocolHasPorts(q.Protocol):
		if q.DstPort == 0 {
			return nil, badQuery("protocol %s needs a destination port", ProtocolName(q.Protocol))
		}
		p.SrcPort, p.DstPort = q.SrcPort, q.DstPort
	case q.SrcPort != 0 || q.DstPort != 0:
		return nil, badQuery("protocol %s has no ports", ProtocolName(q.Protocol))
	}
	if q.Protocol == 58 && p.Family() == 4 || q.Protocol == 1 && p.Family() == 6 {
		return nil, badQuery("protocol %s is not of IPv%d, the family of %s and %s", ProtocolName(q.Protocol), p.Family(), from.addr, to.addr)
	}
	if p.IsICMP() {
		p.ICMPType, p.ICMPCode = q.ICMPType, q.ICMPCode
	} else if q.ICMPType != 0 || q.ICMPCode != 0 {
		return nil, badQuery("an ICMP type or code needs protocol icmp (IPv4) or icmpv6 (IPv6)")
	}
	x.out = &Explanation{From: from.peer, To: to.peer, Packet: packetInfo(p), Service: svc}
	if svc != nil {
		x.note("%s", serviceNote(svc))
	}
	x.findHolders(from.addr, to.addr)
	x.paths(from, to, p)
	x.out.Verdict = VerdictAllow
	for i, s := range x.out.Sides {
		if x.out.Verdict == VerdictDeny {
			x.out.Sides[i].NotReached = true
		}
		if s.Verdict != VerdictAllow {
			x.out.Verdict = VerdictDeny
		}
	}
	x.hostChainNotes()
	if x.g.hostname != "" {
		x.out.Node = x.g.hostname
	}
	return x.out, nil
}

// hostChainNotes marks the explanation incomplete where the iptables
// dataplane of a side's node lets rules outside felix's chains decide:
// chainInsertMode Append puts other programs' rules first, and
// iptablesFilterAllowAction Return hands an allowed packet back to them.
func (x *explainer) hostChainNotes() {
	for _, s := range x.out.Sides {
		if s.Node == "" || s.NotReached {
			continue
		}
		cfg, _ := x.config(s.Node)
		if cfg.Spec.BPFEnabled != nil && *cfg.Spec.BPFEnabled {
			continue
		}
		if cfg.ChainInsertMode == "Append" {
			x.out.Incomplete = true
			x.note("on node %s felix's chains come after the kernel chains' other rules (chainInsertMode Append): a rule of another program may decide first", s.Node)
		}
		if cfg.IptablesFilterAllowAction == "Return" && s.Verdict == VerdictAllow {
			x.out.Incomplete = true
			x.note("on node %s an allowed packet returns to the kernel chain that jumped to felix's (iptablesFilterAllowAction Return): the rules after that jump decide", s.Node)
		}
	}
}

func packetInfo(p Packet) PacketInfo {
	pi := PacketInfo{Protocol: ProtocolName(p.Protocol), Source: p.Src.String(), Destination: p.Dst.String()}
	if p.HasPorts() {
		pi.SourcePort, pi.DestinationPort = p.SrcPort, p.DstPort
	}
	if p.IsICMP() {
		t, c := p.ICMPType, p.ICMPCode
		pi.ICMPType, pi.ICMPCode = &t, &c
	}
	return pi
}

// InSet implements Membership: an address is in a set when an item
// holding it matches the set's spec; for a named-port set, when that
// item's member for the port is addr,proto:port.
func (x *explainer) InSet(id string, addr netip.Addr, proto uint8, port uint16) bool {
	s := x.specs[id]
	if s == nil {
		return false
	}
	if s.service != "" {
		m := addr.String()
		if s.svcPorts {
			m += "," + ProtocolName(proto) + ":" + fmt.Sprint(port)
		}
		_, ok := x.g.labels.services.members(s.service, s.svcPorts)[m]
		return ok
	}
	want := ""
	if s.namedPort != "" {
		want = addr.String() + "," + ProtocolName(proto) + ":" + fmt.Sprint(port)
	}
	for _, it := range x.holders[addr] {
		if !s.matches(it) {
			continue
		}
		if want == "" {
			return true
		}
		if slices.Contains(s.members(it, nil), want) {
			return true
		}
	}
	return false
}

// Describe implements Membership.
func (x *explainer) Describe(id string) string {
	if s := x.specs[id]; s != nil {
		return s.describe()
	}
	return "set " + id
}

// describe says what a set holds, for people.
func (s *ipSetSpec) describe() string {
	if s.service != "" {
		if s.svcPorts {
			return "endpoints of Service " + s.service + " on its ports"
		}
		return "endpoints of Service " + s.service
	}
	sel := "all()"
	if s.sel != nil {
		sel = s.sel.String()
	}
	var parts []string
	if s.namedPort != "" {
		parts = append(parts, fmt.Sprintf("named port %s/%s of", s.namedPort, s.proto))
	}
	parts = append(parts, "selector "+sel)
	switch {
	case s.namespace != "":
		parts = append(parts, "in namespace "+s.namespace)
	case s.nsGlobal:
		parts = append(parts, "outside every namespace (global())")
	case s.nsSel != nil:
		parts = append(parts, "in namespaces matching "+s.nsSel.String())
	}
	if s.hasSA {
		var sa []string
		if len(s.saNames) > 0 {
			sa = append(sa, "named "+strings.Join(s.saNames, ", "))
		}
		if s.saSel != nil {
			sa = append(sa, "matching "+s.saSel.String())
		}
		parts = append(parts, "with a service account "+strings.Join(sa, " and "))
	}
	return strings.Join(parts, " ")
}

// endpoint works out an endpoint's tiers and profiles as the resolver
// would for a local one, compiling what applies.
func (x *explainer) endpoint(it *item) *Endpoint {
	if e, ok := x.endpoints[it]; ok {
		return e
	}
	host := it.kind == itemHost
	le := &localEndpoint{it: it, host: host}
	// tierList orders what matched.
	var matched []*policyInfo
	for _, p := range x.r.policies {
		if p.appliesTo(le) {
			matched = append(matched, p)
			x.compile(p)
		}
	}
	e := &Endpoint{}
	x.r.fillPolicies(e, host, it.profiles, slices.Values(matched))
	for _, name := range e.Profiles {
		if _, ok := x.profiles[name]; ok {
			continue
		}
		cp, specs, notes := x.r.compileProfile(name, x.r.profiles[name].profile)
		x.profiles[name] = cp
		x.addSpecs(specs)
		x.addNotes(RuleRef{Kind: KindNameProfile, Name: name}, notes)
	}
	x.endpoints[it] = e
	return e
}

func (x *explainer) compile(p *policyInfo) {
	if _, ok := x.compiled[p.key]; ok {
		return
	}
	cp, specs, notes := x.r.compilePolicy(p)
	if !x.g.labels.services.synced && (namesService(p.inRules) || namesService(p.outRules)) {
		x.out.Incomplete = true
		x.note("policy %s names a Service: felix matches the endpoints of its EndpointSlices, read from the Kubernetes API, which this explanation does not read", p.id)
	}
	x.compiled[p.key] = cp
	x.byID[cp.ID] = cp
	x.addSpecs(specs)
	kind := KindNameNetworkPolicy
	if p.id.Namespace == "" {
		kind = KindNameGlobalNetworkPolicy
	}
	x.addNotes(RuleRef{Kind: kind, Tier: p.id.Tier, Namespace: p.id.Namespace, Name: p.id.Name}, notes)
}

func (x *explainer) addSpecs(specs []*ipSetSpec) {
	for _, s := range specs {
		x.specs[s.id] = s
	}
}

func (x *explainer) addNotes(ref RuleRef, notes []ruleNote) {
	for _, n := range notes {
		r := ref
		r.Direction = n.dir
		x.notes[r] = append(x.notes[r], RuleNote{Index: n.index, Action: Action(n.action), Kept: n.kept, Note: n.reason()})
	}
}

func (x *explainer) policies() Policies {
	return Policies{
		Policy:  func(id PolicyID) *Policy { return x.byID[id] },
		Profile: func(name string) *Profile { return x.profiles[name] },
		Sets:    x,
		Notes:   func(ref RuleRef) []RuleNote { ref.Index = 0; return x.notes[ref] },
	}
}

// config is the FelixConfiguration of a node, and whether this graph
// knows it.
func (x *explainer) config(node string) (*Config, bool) {
	g := x.g
	switch {
	case node == g.hostname:
		// felix's own graph knows its local configuration too; one
		// loaded from the datastore (calicoctl) cannot see a node's
		// FELIX_ environment or config file.
		return MergeConfig(g.felixGlobal, g.felixNode, g.felixLocal), true
	case g.otherNodes[node] != nil:
		return MergeConfig(g.felixGlobal, g.otherNodes[node]), true
	}
	// A live node's syncer reads only its own node.<name>: another
	// node's may differ.
	return MergeConfig(g.felixGlobal, nil), g.hostname == ""
}

func (x *explainer) note(format string, a ...any) {
	n := fmt.Sprintf(format, a...)
	if !slices.Contains(x.out.Notes, n) {
		x.out.Notes = append(x.out.Notes, n)
	}
}
