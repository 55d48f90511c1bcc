package calc

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/selector"
)

// ruleCompiler is the stage that turns projectcalico.org/v3 rules into
// Rules: selectors become IP set specs, named ports ip,port set specs. It
// caches parsed selectors, which repeat a lot across policies.
type ruleCompiler struct {
	parsed map[string]*selector.Selector
	// services, once synced, lets rules name a Service; nil or not yet
	// synced, such a rule fails closed.
	services *serviceIndex
}

func newRuleCompiler() *ruleCompiler {
	return &ruleCompiler{parsed: map[string]*selector.Selector{}}
}

// parse returns the parsed selector, nil for an empty one or a bad one
// (validation rejects those before they reach the datastore).
func (c *ruleCompiler) parse(s string) (*selector.Selector, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	if sel, ok := c.parsed[s]; ok {
		return sel, sel != nil
	}
	sel, err := selector.Parse(s)
	if err != nil {
		log.WithError(err).WithField("selector", s).Warn("A selector does not parse")
	}
	if len(c.parsed) > 100_000 {
		clear(c.parsed)
	}
	c.parsed[s] = sel
	return sel, sel != nil
}

// ruleNote is what compile says of a rule it could not take as written:
// one with fields felix cannot enforce (gaps), or one no packet can match.
type ruleNote struct {
	dir    string
	index  int
	action string
	// kept says the rule is compiled (as a Deny of the rest of it).
	kept bool
	gaps []string
}

// text is the note as felix logs it.
func (n ruleNote) text() string {
	return fmt.Sprintf("%s rule %d (%s): %s", n.dir, n.index, n.action, n.reason())
}

// reason is the note without the rule's name.
func (n ruleNote) reason() string {
	if len(n.gaps) == 0 {
		return "no packet can match it (ICMP with the other IP version), so it matches nothing"
	}
	verdict := "it matches nothing"
	if n.kept {
		verdict = "it denies what the rest of the rule matches"
	}
	return strings.Join(n.gaps, ", ") + " cannot be enforced, so " + verdict
}

// gapTexts are the logged texts of the notes about fields felix cannot
// enforce.
func gapTexts(notes []ruleNote) []string {
	var out []string
	for _, n := range notes {
		if len(n.gaps) > 0 {
			out = append(out, n.text())
		}
	}
	return out
}

// compile converts the rules of a policy or profile. namespace is the
// NetworkPolicy's namespace ("" for global policies and profiles). It
// returns the rules, the specs of every IP set they refer to, and a note
// for each rule with a field felix cannot enforce or that no packet can
// match (dir names the rules' direction in the notes).
func (c *ruleCompiler) compile(rules []v3.Rule, namespace, dir string) ([]Rule, []*ipSetSpec, []ruleNote) {
	var out []Rule
	var specs []*ipSetSpec
	var notes []ruleNote
	for i, r := range rules {
		cr, ss, gaps, ok := c.compileRule(r, namespace)
		if len(gaps) > 0 || !ok {
			notes = append(notes, ruleNote{dir: dir, index: i, action: string(r.Action), kept: ok, gaps: gaps})
		}
		if !ok {
			continue
		}
		cr.Index = i
		if r.Metadata != nil {
			cr.Name = r.Metadata.Annotations[v3.RuleNameAnnotation]
		}
		out = append(out, cr)
		specs = append(specs, ss...)
	}
	return out, specs, notes
}

// compileRule converts one rule. A field felix cannot enforce (services,
// http, or a value that does not parse) is never just left out, which
// would widen the rule: gaps names each such field, and the rule then
// fails closed. An Allow or Log rule matches nothing (ok false). A Deny
// rule denies what the rest of it matches (more than written, never
// less), and so does a Pass rule: passing more or fewer packets to the
// next tier could each let through what the policy would not.
func (c *ruleCompiler) compileRule(r v3.Rule, namespace string) (cr Rule, specs []*ipSetSpec, gaps []string, ok bool) {
	gap := func(field string) { gaps = append(gaps, field) }
	switch {
	case strings.EqualFold(string(r.Action), string(Allow)):
		cr.Action = Allow
	case strings.EqualFold(string(r.Action), string(Deny)):
		cr.Action = Deny
	case strings.EqualFold(string(r.Action), string(Log)):
		cr.Action = Log
	case strings.EqualFold(string(r.Action), string(Pass)):
		cr.Action = Pass
	default:
		gap("action " + strconv.Quote(string(r.Action)))
		cr.Action = Deny
	}
	if r.IPVersion != nil {
		switch *r.IPVersion {
		case 4, 6:
			cr.IPVersion = *r.IPVersion
		default:
			gap("ipVersion")
		}
	}
	proto, portsOK := "", false
	if r.Protocol != nil {
		if n, err := r.Protocol.NumValue(); err != nil {
			gap("protocol")
		} else {
			cr.Protocol = n
			family := 0
			switch n {
			case 1:
				family = 4
			case 58:
				family = 6
			case 6:
				proto, portsOK = "tcp", true
			case 17:
				proto, portsOK = "udp", true
			case 132:
				proto, portsOK = "sctp", true
			case 136:
				proto, portsOK = "udplite", true
			}
			if family != 0 {
				if cr.IPVersion != 0 && cr.IPVersion != family {
					// ICMP in IPv6 (or ICMPv6 in IPv4): no packet is both.
					return cr, nil, nil, false
				}
				cr.IPVersion = family
			}
		}
	}
	if r.NotProtocol != nil {
		if n, err := r.NotProtocol.NumValue(); err != nil {
			gap("notProtocol")
		} else {
			cr.NotProtocol = n
		}
	}
	icmpOK := cr.Protocol == 1 || cr.Protocol == 58
	cr.ICMPType, cr.ICMPCode = c.icmp(r.ICMP, icmpOK, "icmp", gap)
	cr.NotICMPType, cr.NotICMPCode = c.icmp(r.NotICMP, icmpOK, "notICMP", gap)
	if h := r.HTTP; h != nil && (len(h.Methods) > 0 || len(h.Paths) > 0) {
		gap("http")
	}
	pp := portProto{name: proto, set: r.Protocol != nil, ports: portsOK}
	src := c.entity(r.Source, namespace, pp, "source", gap)
	dst := c.entity(r.Destination, namespace, pp, "destination", gap)
	if len(gaps) > 0 {
		if cr.Action == Allow || cr.Action == Log {
			return cr, nil, gaps, false
		}
		cr.Action = Deny
	}
	cr.SrcNets, cr.NotSrcNets = src.nets, src.notNets
	cr.DstNets, cr.NotDstNets = dst.nets, dst.notNets
	cr.SrcPorts, cr.NotSrcPorts = src.ports, src.notPorts
	cr.DstPorts, cr.NotDstPorts = dst.ports, dst.notPorts
	ids := func(ss []*ipSetSpec) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.id)
		}
		return out
	}
	cr.SrcIPSets, cr.NotSrcIPSets = ids(src.sets), ids(src.notSets)
	cr.DstIPSets, cr.NotDstIPSets = ids(dst.sets), ids(dst.notSets)
	cr.SrcNamedPortIPSets, cr.NotSrcNamedPortIPSets = ids(src.namedPorts), ids(src.notNamedPorts)
	cr.DstNamedPortIPSets, cr.NotDstNamedPortIPSets = ids(dst.namedPorts), ids(dst.notNamedPorts)
	for _, e := range []*entity{src, dst} {
		specs = append(specs, e.sets...)
		specs = append(specs, e.notSets...)
		specs = append(specs, e.namedPorts...)
		specs = append(specs, e.notNamedPorts...)
	}
	// A rule whose nets are all of one family applies to that family.
	if cr.IPVersion == 0 {
		cr.IPVersion = netsFamily(cr.SrcNets, cr.DstNets)
	}
	return cr, specs, gaps, true
}

// icmp converts an icmp or notICMP match. It is enforceable only on an
// ICMP or ICMPv6 rule, with a type of 0-254 (iptables reads 255 as any
// type) and a code of 0-255 that comes with a type.
func (c *ruleCompiler) icmp(f *v3.ICMPFields, protoOK bool, field string, gap func(string)) (typ, code *uint8) {
	if f == nil || f.Type == nil && f.Code == nil {
		return nil, nil
	}
	switch {
	case !protoOK:
		gap(field + " (without protocol ICMP or ICMPv6)")
	case f.Type == nil:
		gap(field + ".code (without a type)")
	case *f.Type < 0 || *f.Type > 254:
		gap(field + ".type")
	case f.Code != nil && (*f.Code < 0 || *f.Code > 255):
		gap(field + ".code")
	default:
		return u8(f.Type), u8(f.Code)
	}
	return nil, nil
}

func netsFamily(lists ...[]netip.Prefix) int {
	fam := 0
	for _, l := range lists {
		for _, p := range l {
			f := 4
			if p.Addr().Is6() {
				f = 6
			}
			if fam != 0 && fam != f {
				return 0
			}
			fam = f
		}
	}
	return fam
}

func u8(p *int) *uint8 {
	if p == nil {
		return nil
	}
	v := uint8(*p)
	return &v
}

// entity is a compiled source or destination.
type entity struct {
	nets, notNets             []netip.Prefix
	ports, notPorts           []PortRange
	sets, notSets             []*ipSetSpec
	namedPorts, notNamedPorts []*ipSetSpec
}

// portProto is what a rule's protocol allows of port matches: name is the
// protocol of named-port sets ("" for TCP and UDP), set says the rule has
// a protocol, ports that it is one with ports.
type portProto struct {
	name       string
	set, ports bool
}

// entity compiles a source or destination. A field it cannot enforce is
// reported to gap (prefixed with side) and left out of the result.
func (c *ruleCompiler) entity(e v3.EntityRule, namespace string, proto portProto, side string, gap func(string)) *entity {
	out := &entity{}
	var ok bool
	if out.nets, ok = parseNets(e.Nets); !ok {
		gap(side + ".nets")
	}
	if out.notNets, ok = parseNets(e.NotNets); !ok {
		gap(side + ".notNets")
	}
	var svcSet *ipSetSpec
	if svc := e.Services; svc != nil {
		ns := svc.Namespace
		if ns == "" {
			ns = namespace
		}
		switch {
		case c.services == nil || !c.services.synced:
			gap(side + ".services (EndpointSlices not read from the Kubernetes API)")
		case ns == "" || svc.Name == "":
			gap(side + ".services")
		default:
			// A source matches the Service's endpoints, a destination
			// their addresses with their slices' ports.
			svcSet = withID(&ipSetSpec{service: ns + "/" + svc.Name, svcPorts: side == "destination"})
		}
	}
	base := &ipSetSpec{}
	sel, ok := c.parse(e.Selector)
	if !ok {
		gap(side + ".selector")
	}
	notSel, ok := c.parse(e.NotSelector)
	if !ok {
		gap(side + ".notSelector")
	}
	nsSel, ok := c.parse(e.NamespaceSelector)
	if !ok {
		gap(side + ".namespaceSelector")
	}
	base.sel = sel
	switch {
	case nsSel != nil && nsSel.IsGlobal():
		base.nsGlobal = true
	case nsSel != nil:
		base.nsSel = nsSel
	default:
		base.namespace = namespace
	}
	if sa := e.ServiceAccounts; sa != nil && (len(sa.Names) > 0 || sa.Selector != "") {
		if saSel, ok := c.parse(sa.Selector); !ok {
			gap(side + ".serviceAccounts.selector")
		} else {
			base.hasSA = true
			base.saNames = slices.Sorted(slices.Values(sa.Names))
			base.saSel = saSel
		}
	}
	// The positive set exists when anything selects endpoints: in a
	// NetworkPolicy even a bare notSelector is limited to the namespace.
	if sel != nil || nsSel != nil || base.hasSA || (notSel != nil && namespace != "") {
		out.sets = append(out.sets, withID(base))
	}
	if notSel != nil {
		ns := *base
		ns.sel, ns.hasSA, ns.saNames, ns.saSel = notSel, false, nil, nil
		out.notSets = append(out.notSets, withID(&ns))
	}
	// A named port with nothing selecting endpoints resolves on every
	// endpoint, in every namespace, as Calico's (a Kubernetes egress rule
	// to a named port and no peer allows that port on any pod).
	portBase := base
	if sel == nil && nsSel == nil && notSel == nil && !base.hasSA {
		unscoped := *base
		unscoped.namespace = ""
		portBase = &unscoped
	}
	ports := func(in []numorstring.Port, field string) (numeric []PortRange, named []*ipSetSpec) {
		for _, p := range in {
			switch {
			case p.PortName != "" && (proto.ports || !proto.set):
				// A named port of a rule with no protocol is TCP or UDP.
				named = append(named, namedPortSpecs(portBase, p.PortName, proto.name)...)
			case p.PortName == "" && proto.ports && p.MinPort <= p.MaxPort:
				numeric = append(numeric, PortRange{p.MinPort, p.MaxPort})
			default:
				// A port needs a protocol with ports (iptables has no
				// portless match for one).
				gap(side + "." + field)
				return nil, nil
			}
		}
		return numeric, named
	}
	out.ports, out.namedPorts = ports(e.Ports, "ports")
	out.notPorts, out.notNamedPorts = ports(e.NotPorts, "notPorts")
	switch {
	case svcSet == nil:
	case !svcSet.svcPorts:
		out.sets = append(out.sets, svcSet)
	case len(out.ports) > 0 || len(out.namedPorts) > 0:
		// Ports would be alternatives to the Service's ports, not limits
		// (validation rejects them).
		gap(side + ".ports (with services)")
	default:
		out.namedPorts = []*ipSetSpec{svcSet}
	}
	return out
}

// namedPortSpecs makes the ip,port sets of a named port: one for the
// rule's protocol, or TCP and UDP when it names none.
func namedPortSpecs(base *ipSetSpec, name, proto string) []*ipSetSpec {
	protos := []string{proto}
	if proto == "" {
		protos = []string{"tcp", "udp"}
	}
	var out []*ipSetSpec
	for _, p := range protos {
		s := *base
		s.namedPort, s.proto = name, p
		out = append(out, withID(&s))
	}
	return out
}

// withID gives a spec its stable ID: the selector's UniqueID when it is a
// plain selector, otherwise a hash of every field in canonical form.
func withID(s *ipSetSpec) *ipSetSpec {
	plain := s.namespace == "" && s.nsSel == nil && !s.nsGlobal && !s.hasSA && s.namedPort == "" && s.service == ""
	if plain {
		sel := s.sel
		if sel == nil {
			sel = selector.MustParse("all()")
			s.sel = sel
		}
		s.id = sel.UniqueID()
		return s
	}
	var b strings.Builder
	str := func(x *selector.Selector) string {
		if x == nil {
			return ""
		}
		return x.String()
	}
	b.WriteString("sel=" + str(s.sel))
	b.WriteString(";ns=" + s.namespace)
	b.WriteString(";nssel=" + str(s.nsSel))
	if s.nsGlobal {
		b.WriteString(";nsglobal")
	}
	if s.hasSA {
		b.WriteString(";sa=" + strings.Join(s.saNames, ",") + ";sasel=" + str(s.saSel))
	}
	prefix := "s:"
	if s.service != "" {
		// Only the Service names the set's members.
		b.Reset()
		b.WriteString("svc=" + s.service)
		prefix = "v:"
		if s.svcPorts {
			b.WriteString(";ports")
			prefix = "w:"
		}
	}
	if s.namedPort != "" {
		prefix = "n:"
		b.WriteString(";port=" + s.proto + "/" + s.namedPort)
	}
	sum := sha256.Sum224([]byte(b.String()))
	s.id = prefix + base64.RawURLEncoding.EncodeToString(sum[:])[:22]
	return s
}

// parseNets reads CIDRs or bare addresses.
func parseNets(in []string) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := ParseNet(s)
		if err != nil {
			log.WithError(err).WithField("net", s).Warn("A net does not parse")
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// ParseNet reads a CIDR or a bare address (a host prefix), masked.
func ParseNet(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// protoName is the lower-case name of a named-port protocol.
func protoName(p numorstring.Protocol) string {
	n, err := p.NumValue()
	if err != nil {
		return strings.ToLower(p.StrVal)
	}
	switch n {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return strings.ToLower(p.String())
}
