package calc

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
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
// workload-to-host special cases.

// End names one end of a packet: a pod or WorkloadEndpoint (Namespace
// and Name: the pod's name, or the WorkloadEndpoint's), a HostEndpoint
// (Name only), or an address (Address).
type End struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Address   string `json:"address,omitempty"`
}

func (e End) String() string {
	switch {
	case e.Address != "":
		return e.Address
	case e.Namespace != "":
		return e.Namespace + "/" + e.Name
	}
	return e.Name
}

// Query is a packet to explain: its ends, protocol and ports (or ICMP
// type and code).
type Query struct {
	From     End   `json:"from"`
	To       End   `json:"to"`
	Protocol uint8 `json:"protocol"`
	// SrcPort and DstPort are the ports of a protocol with ports.
	SrcPort uint16 `json:"srcPort,omitempty"`
	DstPort uint16 `json:"dstPort,omitempty"`
	// ICMPType and ICMPCode are those of an ICMP or ICMPv6 packet.
	ICMPType uint8 `json:"icmpType,omitempty"`
	ICMPCode uint8 `json:"icmpCode,omitempty"`
	// Hosts maps the nodes' own addresses (Node resources) to the nodes'
	// names: an address no endpoint holds that is one of them is that
	// node's host.
	Hosts map[string]string `json:"hosts,omitempty"`
}

// Peer kinds.
const (
	PeerWorkload = "WorkloadEndpoint"
	PeerHostEP   = "HostEndpoint"
	PeerHost     = "Host"
	PeerExternal = "External"
)

// Peer is one end as it was resolved.
type Peer struct {
	// Kind is WorkloadEndpoint, HostEndpoint, Host (a node's own address
	// that no host endpoint holds) or External (outside every IP pool).
	Kind      string            `json:"kind"`
	Namespace string            `json:"namespace,omitempty"`
	Name      string            `json:"name,omitempty"`
	Pod       string            `json:"pod,omitempty"`
	Node      string            `json:"node,omitempty"`
	Interface string            `json:"interface,omitempty"`
	Address   string            `json:"address"`
	Labels    map[string]string `json:"labels,omitempty"`
}

func (p Peer) String() string {
	switch p.Kind {
	case PeerWorkload:
		name := p.Namespace + "/" + p.Name
		if p.Pod != "" {
			name = "pod " + p.Namespace + "/" + p.Pod
		}
		return fmt.Sprintf("%s (%s on %s)", name, p.Address, p.Node)
	case PeerHostEP:
		return fmt.Sprintf("host endpoint %s (%s on %s)", p.Name, p.Address, p.Node)
	case PeerHost:
		return fmt.Sprintf("host %s (%s)", p.Node, p.Address)
	}
	return fmt.Sprintf("%s (outside the cluster)", p.Address)
}

// Stage names, in the order a packet meets them.
const (
	StageNeighbourDiscovery = "neighbour-discovery"
	StageFailsafe           = "failsafe"
	StageUntracked          = "untracked"
	StagePreDNAT            = "preDNAT"
	StageForward            = "forward"
	StagePolicy             = "policy"
	StageEndpointToHost     = "endpoint-to-host"
	StageNotPoliced         = "not-policed"
)

// Stage is one step of a side: a chain of policy, or a fixed rule.
type Stage struct {
	Name string `json:"name"`
	// Endpoint names the host endpoint of a failsafe, untracked, preDNAT
	// or forward stage.
	Endpoint string `json:"endpoint,omitempty"`
	Chain    *Chain `json:"chain,omitempty"`
	// Verdict is the stage's; Final says an Allow ends the side (an
	// Allow of an untracked or preDNAT stage of a forwarded packet only
	// lets it go on to the next stage).
	Verdict Verdict  `json:"verdict"`
	Final   bool     `json:"final,omitempty"`
	Decider *Decider `json:"decider,omitempty"`
}

// Side is the policy one end applies: the source's egress, the
// destination's ingress.
type Side struct {
	// Direction is egress (the source's side) or ingress.
	Direction string   `json:"direction"`
	Endpoint  Peer     `json:"endpoint"`
	Node      string   `json:"node"`
	Stages    []Stage  `json:"stages"`
	Verdict   Verdict  `json:"verdict"`
	Decider   *Decider `json:"decider,omitempty"`
	// NotReached says an earlier side dropped the packet: this side is
	// what would apply, but the packet never gets here.
	NotReached bool `json:"notReached,omitempty"`
}

// PacketInfo is the packet explained.
type PacketInfo struct {
	Protocol        string `json:"protocol"`
	Source          string `json:"source"`
	Destination     string `json:"destination"`
	SourcePort      uint16 `json:"sourcePort,omitempty"`
	DestinationPort uint16 `json:"destinationPort,omitempty"`
	ICMPType        *uint8 `json:"icmpType,omitempty"`
	ICMPCode        *uint8 `json:"icmpCode,omitempty"`
}

// Explanation is the answer: each side walked, and the verdict (Allow
// only when every side allows).
type Explanation struct {
	Packet  PacketInfo `json:"packet"`
	From    Peer       `json:"from"`
	To      Peer       `json:"to"`
	Sides   []Side     `json:"sides"`
	Verdict Verdict    `json:"verdict"`
	// Notes name what the explanation could not see.
	Notes []string `json:"notes,omitempty"`
	// Incomplete says the dataplane's verdict may differ (see Notes): a
	// host endpoint may be on the packet's path that the explanation
	// could not place there (one named only by its interface), or rules
	// outside felix's chains may decide (chainInsertMode Append,
	// iptablesFilterAllowAction Return).
	Incomplete bool `json:"incomplete,omitempty"`
	// Node is the node whose live state answered ("" for the datastore).
	Node string `json:"node,omitempty"`
}

// ErrBadQuery marks an error in the question (an end that does not
// exist, an address no endpoint holds, a protocol without the ports
// asked for), as opposed to a failure to answer.
var ErrBadQuery = errors.New("bad query")

func badQuery(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadQuery, fmt.Sprintf(format, a...))
}

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
	from, err := x.resolve(q.From, q.To, "--from")
	if err != nil {
		return nil, err
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
	x.out = &Explanation{From: from.peer, To: to.peer, Packet: packetInfo(p)}
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

// resolve finds an end named by endpoint; an address is classified later
// (classify), once both families are known.
func (x *explainer) resolve(e End, other End, flag string) (*endRef, error) {
	items := x.g.labels.items
	switch {
	case e.Address != "":
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return nil, badQuery("%s %q: not an IP address", flag, e.Address)
		}
		return &endRef{addr: a.Unmap()}, nil
	case e.Namespace != "":
		if it := items[itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace, Name: e.Name})]; it != nil {
			return x.endpointEnd(itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace, Name: e.Name}), it), nil
		}
		prefix := itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace})
		var keys []string
		for _, it := range x.g.labels.pods[e.Namespace+"/"+e.Name] {
			keys = append(keys, it.key)
		}
		switch len(keys) {
		case 0:
			return nil, badQuery("%s %s: no pod %q (nor WorkloadEndpoint of that name) in namespace %q", flag, e, e.Name, e.Namespace)
		case 1:
			return x.endpointEnd(keys[0], items[keys[0]]), nil
		}
		slices.Sort(keys)
		var names []string
		for _, k := range keys {
			names = append(names, e.Namespace+"/"+k[len(prefix):])
		}
		return nil, badQuery("%s %s: pod %q has %d WorkloadEndpoints (%s): name one", flag, e, e.Name, len(keys), strings.Join(names, ", "))
	case e.Name != "":
		key := itemKey(datastore.Key{Kind: v3.KindHostEndpoint, Name: e.Name})
		if it := items[key]; it != nil {
			return x.endpointEnd(key, it), nil
		}
		return nil, badQuery("%s %s: no HostEndpoint %q (name a pod or WorkloadEndpoint as namespace/name)", flag, e, e.Name)
	}
	return nil, badQuery("%s: nothing named", flag)
}

// endpointEnd is an end that is an endpoint.
func (x *explainer) endpointEnd(key string, it *item) *endRef {
	e := &endRef{it: it, key: key}
	parts := strings.SplitN(key, "/", 3)
	e.peer = Peer{Name: parts[2], Node: it.node, Interface: it.iface, Labels: maps.Clone(it.labels)}
	if it.kind == itemWorkload {
		e.peer.Kind, e.peer.Namespace, e.peer.Pod = PeerWorkload, it.ns, it.pod
	} else {
		e.peer.Kind = PeerHostEP
	}
	return e
}

// pickAddrs gives endpoint ends their address: of the family both ends
// have (IPv4 first).
func (x *explainer) pickAddrs(from, to *endRef, q Query) error {
	families := func(e *endRef) []int {
		if e.it == nil {
			if e.addr.Is4() {
				return []int{4}
			}
			return []int{6}
		}
		var fs []int
		for _, n := range e.it.nets {
			f := 6
			if n.Addr().Is4() {
				f = 4
			}
			if !slices.Contains(fs, f) {
				fs = append(fs, f)
			}
		}
		slices.Sort(fs)
		return fs
	}
	ff, tf := families(from), families(to)
	fam := 0
	for _, f := range ff {
		if slices.Contains(tf, f) {
			fam = f
			break
		}
	}
	if fam == 0 {
		return badQuery("%s and %s have no IP version in common (%v, %v)", q.From, q.To, ff, tf)
	}
	for _, e := range []*endRef{from, to} {
		if e.it == nil {
			continue
		}
		for _, n := range e.it.nets {
			if n.Addr().Is4() == (fam == 4) {
				e.addr = n.Addr()
				break
			}
		}
		e.peer.Address = e.addr.String()
	}
	return nil
}

// classify finds what an address end is: the endpoint holding it, a
// node's host, or outside the cluster. An address in an IP pool that no
// endpoint holds is an error: policy cannot be explained for a pod that
// is not there.
func (x *explainer) classify(e *endRef, q Query, flag string) error {
	if e.it != nil {
		return nil
	}
	var keys []string
	for _, it := range x.g.labels.holders(e.addr) {
		if it.kind != itemNetworkSet {
			keys = append(keys, it.key)
		}
	}
	slices.Sort(keys)
	switch len(keys) {
	case 1:
		addr := e.addr
		*e = *x.endpointEnd(keys[0], x.g.labels.items[keys[0]])
		e.addr, e.peer.Address = addr, addr.String()
		return nil
	case 0:
	default:
		var names []string
		for _, k := range keys {
			kind, rest, _ := strings.Cut(k, "/")
			names = append(names, kind+" "+strings.TrimPrefix(rest, "/"))
		}
		return badQuery("%s %s: held by %d endpoints (%s): name one", flag, e.addr, len(keys), strings.Join(names, ", "))
	}
	e.peer.Address = e.addr.String()
	if node, ok := q.Hosts[e.addr.String()]; ok {
		e.peer.Kind, e.peer.Node = PeerHost, node
		e.hostEP = x.starHostEndpoint(node)
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(x.g.pools)) {
		pool := x.g.pools[name]
		if p, err := ParseNet(pool.CIDR); err == nil && p.Contains(e.addr) {
			return badQuery("%s %s: in IP pool %s (%s), but no endpoint holds it", flag, e.addr, name, pool.CIDR)
		}
	}
	e.peer.Kind = PeerExternal
	return nil
}

// starHostEndpoint is the host endpoint of every interface ("*") of a
// node, or nil.
func (x *explainer) starHostEndpoint(node string) *item {
	var found *item
	for it := range x.g.labels.hosts {
		if it.node == node && it.iface == "*" && (found == nil || it.key < found.key) {
			found = it
		}
	}
	return found
}

// namedHostEndpoints lists a node's host endpoints that name one
// interface (their interfaces are not known to be on the packet's path)
// and have policy that relevant says would matter.
func (x *explainer) namedHostEndpoints(node string, except *item, relevant func(*Endpoint) bool) []string {
	var out []string
	for it := range x.g.labels.hosts {
		if it.node == node && it.iface != "*" && it != except && relevant(x.endpoint(it)) {
			out = append(out, x.keyName(it)+" ("+cmp.Or(it.iface, "named by expectedIPs")+")")
		}
	}
	slices.Sort(out)
	return out
}

// findHolders lists the items holding each address.
func (x *explainer) findHolders(addrs ...netip.Addr) {
	x.holders = map[netip.Addr][]*item{}
	for _, a := range addrs {
		x.holders[a] = x.g.labels.holders(a)
	}
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
		return MergeConfig(g.felixGlobal, g.felixNode), true
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

// paths builds the sides of the packet from, to.
func (x *explainer) paths(from, to *endRef, p Packet) {
	sameNode := from.peer.Node != "" && from.peer.Node == to.peer.Node
	if from.onHost() && to.onHost() && sameNode {
		x.note("both ends are host %s: the packet never leaves it, and felix does not police a host's traffic to itself", from.peer.Node)
		return
	}
	// The source's side.
	switch {
	case from.isWorkload():
		side := x.newSide("egress", from)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if to.onHost() && sameNode {
			x.workloadToHost(&side, from, p)
		} else {
			x.addChain(&side, StagePolicy, "", from.it, false, p, true, false)
			if !sameNode {
				x.forward(&side, from.peer.Node, false, p)
			}
		}
		x.finish(&side)
	case from.onHost():
		side := x.newSide("egress", from)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if to.isWorkload() && sameNode {
			x.notPoliced(&side, "host-to-local-workload",
				fmt.Sprintf("traffic from host %s to its own workloads is not policed (cali-OUTPUT returns packets for workload interfaces)", from.peer.Node))
			x.finish(&side)
			break
		}
		hep := from.hostItem()
		if hep == nil {
			x.notPoliced(&side, "no-host-endpoint", fmt.Sprintf("host %s has no host endpoint for %s, so its own traffic is not policed", from.peer.Node, from.addr))
			x.hostEndpointNote(from.peer.Node, nil)
			x.finish(&side)
			break
		}
		x.hostEndpointNote(from.peer.Node, hep)
		x.hostSide(&side, hep, false, p)
		x.finish(&side)
	}
	// The destination's side.
	switch {
	case to.isWorkload():
		if from.onHost() && sameNode {
			side := x.newSide("ingress", to)
			x.notPoliced(&side, "host-to-local-workload",
				fmt.Sprintf("traffic from host %s to its own workloads is not policed: the workload's ingress policy is not applied", to.peer.Node))
			x.finish(&side)
			break
		}
		side := x.newSide("ingress", to)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if !sameNode {
			x.arriving(&side, to.peer.Node, p)
		}
		x.addChain(&side, StagePolicy, "", to.it, true, p, true, false)
		x.finish(&side)
	case to.onHost():
		if from.isWorkload() && sameNode {
			break // the source's side ended in the endpoint-to-host action
		}
		side := x.newSide("ingress", to)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		hep := to.hostItem()
		if hep == nil {
			x.notPoliced(&side, "no-host-endpoint", fmt.Sprintf("host %s has no host endpoint for %s, so traffic to it is not policed", to.peer.Node, to.addr))
			x.hostEndpointNote(to.peer.Node, nil)
			x.finish(&side)
			break
		}
		x.hostEndpointNote(to.peer.Node, hep)
		x.hostSide(&side, hep, true, p)
		x.finish(&side)
	}
}

func (x *explainer) newSide(dir string, e *endRef) Side {
	return Side{Direction: dir, Endpoint: e.peer, Node: e.peer.Node}
}

// ipv6Off ends a side whose node programs no IPv6 rules.
func (x *explainer) ipv6Off(side *Side, p Packet) bool {
	if p.Family() != 6 {
		return false
	}
	if cfg, _ := x.config(side.Node); cfg.IPv6Support {
		return false
	}
	x.notPoliced(side, "ipv6-off", fmt.Sprintf("ipv6Support is false on node %s: felix writes no IPv6 rules there, so IPv6 is not policed", side.Node))
	return true
}

func (x *explainer) notPoliced(side *Side, what, text string) {
	side.Stages = append(side.Stages, Stage{Name: StageNotPoliced, Verdict: VerdictAllow, Final: true, Decider: &Decider{What: what, Text: text}})
}

// finish takes the side's verdict from its stages: the first Deny, or the
// first final Allow.
func (x *explainer) finish(side *Side) {
	// The first Deny or final Allow decides, and the stages after it are
	// not reached; otherwise the last stage that allowed.
	side.Verdict = VerdictAllow
	decided := false
	for i, st := range side.Stages {
		if st.Verdict == VerdictDeny || st.Verdict == VerdictAllow && st.Final {
			side.Verdict, side.Decider = st.Verdict, st.Decider
			side.Stages = side.Stages[:i+1]
			decided = true
			break
		}
	}
	for i := len(side.Stages) - 1; !decided && i >= 0; i-- {
		if side.Stages[i].Verdict == VerdictAllow {
			side.Decider, decided = side.Stages[i].Decider, true
		}
	}
	x.out.Sides = append(x.out.Sides, *side)
}

// addChain evaluates one endpoint chain of it as a stage.
func (x *explainer) addChain(side *Side, name, epName string, it *item, ingress bool, p Packet, final, finalAllow bool) Chain {
	e := x.endpoint(it)
	var tiers []TierPolicies
	profiles := e.Profiles
	switch name {
	case StageUntracked:
		tiers, profiles = e.UntrackedTiers, nil
	case StagePreDNAT:
		tiers, profiles = e.PreDNATTiers, nil
	case StageForward:
		tiers, profiles = e.ForwardTiers, nil
	default:
		tiers = e.Tiers
	}
	c := EvalChain(tiers, profiles, ingress, p, x.policies(), final)
	side.Stages = append(side.Stages, Stage{Name: name, Endpoint: epName, Chain: &c, Verdict: c.Verdict, Final: finalAllow, Decider: c.Decider})
	return c
}

// hasTiers reports whether tiers have a policy for the direction.
func hasTiers(tiers []TierPolicies, ingress bool) bool { return HasPolicy(tiers, ingress) }

// workloadToHost is a workload's packet to its own host: the neighbour
// discovery ICMPv6 felix always accepts, the workload's egress chain,
// then DefaultEndpointToHostAction.
func (x *explainer) workloadToHost(side *Side, from *endRef, p Packet) {
	if p.Family() == 6 && p.Protocol == 58 && slices.Contains([]uint8{130, 131, 132, 133, 135, 136}, p.ICMPType) {
		side.Stages = append(side.Stages, Stage{Name: StageNeighbourDiscovery, Verdict: VerdictAllow, Final: true,
			Decider: &Decider{What: "neighbour-discovery", Text: fmt.Sprintf("ICMPv6 type %d from a workload to its host is always accepted (neighbour discovery and multicast listener messages)", p.ICMPType)}})
		return
	}
	c := x.addChain(side, StagePolicy, "", from.it, false, p, true, false)
	if c.Verdict != VerdictAllow {
		return
	}
	cfg, known := x.config(from.peer.Node)
	if !known {
		x.note("node %s's own FelixConfiguration (node.%s) is not known to this node: its defaultEndpointToHostAction is taken from the global one", from.peer.Node, from.peer.Node)
	}
	act := cmp.Or(cfg.DefaultEndpointToHostAction, "Drop")
	st := Stage{Name: StageEndpointToHost, Final: true}
	switch strings.ToLower(act) {
	case "accept":
		st.Verdict = VerdictAllow
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: "defaultEndpointToHostAction Accept: workload traffic to its host is accepted after the workload's egress policy"}
	case "return":
		st.Verdict = VerdictAllow
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: "defaultEndpointToHostAction Return: after the workload's egress policy the packet returns to the host's INPUT chain, whose other rules decide"}
	default:
		st.Verdict = VerdictDeny
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: fmt.Sprintf("defaultEndpointToHostAction %s: workload traffic to its own host is dropped after the workload's egress policy", act)}
	}
	side.Stages = append(side.Stages, st)
}

// hostSide is a host endpoint's policy for traffic to (ingress) or from
// the host itself: failsafe ports, untracked policy, preDNAT policy
// (ingress), then its normal policy and profiles.
func (x *explainer) hostSide(side *Side, hep *item, ingress bool, p Packet) {
	name := x.keyName(hep)
	cfg, known := x.config(hep.node)
	if !known {
		x.note("node %s's own FelixConfiguration (node.%s) is not known to this node: its failsafe ports are taken from the global one", hep.node, hep.node)
	}
	ports, dir := cfg.FailsafeOutbound, "outbound"
	remote, port := p.Dst, p.DstPort
	if ingress {
		ports, dir, remote = cfg.FailsafeInbound, "inbound", p.Src
	}
	for _, fp := range ports {
		if fp.Protocol != ProtocolName(p.Protocol) || fp.Port != port {
			continue
		}
		if fp.Net.IsValid() && (fp.Net.Addr().Is4() != remote.Is4() || !fp.Net.Contains(remote)) {
			continue
		}
		where := ""
		if fp.Net.IsValid() {
			where = " for " + fp.Net.String()
		}
		side.Stages = append(side.Stages, Stage{Name: StageFailsafe, Endpoint: name, Verdict: VerdictAllow, Final: true,
			Decider: &Decider{What: "failsafe", Text: fmt.Sprintf("%s/%d is a failsafe %s port%s: it is always open, before any policy", fp.Protocol, fp.Port, dir, where)}})
		return
	}
	e := x.endpoint(hep)
	if hasTiers(e.UntrackedTiers, ingress) {
		x.addChain(side, StageUntracked, name, hep, ingress, p, false, true)
	}
	if ingress && hasTiers(e.PreDNATTiers, true) {
		x.addChain(side, StagePreDNAT, name, hep, true, p, false, true)
	}
	x.addChain(side, StagePolicy, name, hep, ingress, p, true, false)
}

// keyName is a host endpoint's name.
func (x *explainer) keyName(it *item) string {
	return strings.TrimPrefix(it.key, v3.KindHostEndpoint+"//")
}

// forward is the leaving (ingress false) or arriving host endpoint
// forward policy of a node for a forwarded packet: the "*" host
// endpoint's applyOnForward policy, when it has one for the direction.
func (x *explainer) forward(side *Side, node string, ingress bool, p Packet) {
	star := x.starHostEndpoint(node)
	x.forwardNote(node)
	if star == nil {
		return
	}
	if !hasTiers(x.endpoint(star).ForwardTiers, ingress) {
		return
	}
	x.addChain(side, StageForward, x.keyName(star), star, ingress, p, true, false)
}

// arriving is what a packet from off the node meets on the node's "*"
// host endpoint before the workload's ingress: untracked and preDNAT
// policy (a Deny drops; an Allow lets it go on, to filter's FORWARD), and
// forward policy.
func (x *explainer) arriving(side *Side, node string, p Packet) {
	star := x.starHostEndpoint(node)
	if star != nil {
		e := x.endpoint(star)
		name := x.keyName(star)
		if hasTiers(e.UntrackedTiers, true) {
			x.addChain(side, StageUntracked, name, star, true, p, false, false)
		}
		if hasTiers(e.PreDNATTiers, true) {
			x.addChain(side, StagePreDNAT, name, star, true, p, false, false)
		}
	}
	x.forward(side, node, true, p)
}

// forwardNote names the host endpoints of a node whose interface the
// packet may cross but that the explanation cannot place on its path.
func (x *explainer) forwardNote(node string) {
	special := func(e *Endpoint) bool {
		return len(e.ForwardTiers)+len(e.PreDNATTiers)+len(e.UntrackedTiers) > 0
	}
	for _, name := range x.namedHostEndpoints(node, nil, special) {
		x.out.Incomplete = true
		x.note("node %s has host endpoint %s: a forwarded packet crossing its interface also meets its applyOnForward, preDNAT and doNotTrack policy, which is not evaluated here (the interface a packet takes is not in the datastore)", node, name)
	}
}

// hostEndpointNote names the other host endpoints of a host end's node.
func (x *explainer) hostEndpointNote(node string, used *item) {
	for _, name := range x.namedHostEndpoints(node, used, func(*Endpoint) bool { return true }) {
		x.out.Incomplete = true
		x.note("node %s has host endpoint %s, not evaluated here: the interface a packet takes is not in the datastore", node, name)
	}
}

// NewExplainGraph makes a graph of no node, for explanations: feed it
// the cluster's state (OnUpdate) and ask Explain. No endpoint is local,
// so nothing is compiled until asked and nothing is sent anywhere.
func NewExplainGraph() *Graph { return NewGraph("", discard{}) }

// discard is a Dataplane that drops everything.
type discard struct{}

func (discard) OnConfigUpdate(*Config)                  {}
func (discard) OnIPSetUpdate(*IPSet)                    {}
func (discard) OnIPSetDelta(string, []string, []string) {}
func (discard) OnIPSetRemoved(string)                   {}
func (discard) OnPolicyUpdate(*Policy)                  {}
func (discard) OnPolicyRemoved(PolicyID)                {}
func (discard) OnProfileUpdate(*Profile)                {}
func (discard) OnProfileRemoved(string)                 {}
func (discard) OnEndpointUpdate(*Endpoint)              {}
func (discard) OnEndpointRemoved(EndpointID)            {}
func (discard) OnRouteUpdate(Route)                     {}
func (discard) OnRouteRemoved(netip.Prefix)             {}
func (discard) OnInSync()                               {}
