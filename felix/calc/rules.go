package calc

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"slices"
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
		log.WithError(err).WithField("selector", s).Warn("Ignoring a selector that does not parse")
	}
	if len(c.parsed) > 100_000 {
		clear(c.parsed)
	}
	c.parsed[s] = sel
	return sel, sel != nil
}

// compile converts the rules of a policy or profile. namespace is the
// NetworkPolicy's namespace ("" for global policies and profiles). It
// returns the rules and the specs of every IP set they refer to.
func (c *ruleCompiler) compile(rules []v3.Rule, namespace string) ([]Rule, []*ipSetSpec) {
	var out []Rule
	var specs []*ipSetSpec
	for i, r := range rules {
		cr, ss, ok := c.compileRule(r, namespace)
		if !ok {
			continue
		}
		cr.Index = i
		out = append(out, cr)
		specs = append(specs, ss...)
	}
	return out, specs
}

func (c *ruleCompiler) compileRule(r v3.Rule, namespace string) (Rule, []*ipSetSpec, bool) {
	cr := Rule{Action: Action(r.Action)}
	if r.IPVersion != nil {
		cr.IPVersion = *r.IPVersion
	}
	proto := ""
	if r.Protocol != nil {
		n, err := r.Protocol.NumValue()
		if err != nil {
			return cr, nil, false
		}
		cr.Protocol = n
		switch n {
		case 1:
			cr.IPVersion = 4
		case 58:
			cr.IPVersion = 6
		case 6:
			proto = "tcp"
		case 17:
			proto = "udp"
		case 132:
			proto = "sctp"
		}
	}
	if r.NotProtocol != nil {
		n, err := r.NotProtocol.NumValue()
		if err != nil {
			return cr, nil, false
		}
		cr.NotProtocol = n
	}
	if r.ICMP != nil {
		cr.ICMPType, cr.ICMPCode = u8(r.ICMP.Type), u8(r.ICMP.Code)
	}
	if r.NotICMP != nil {
		cr.NotICMPType, cr.NotICMPCode = u8(r.NotICMP.Type), u8(r.NotICMP.Code)
	}
	var specs []*ipSetSpec
	src, ok := c.entity(r.Source, namespace, proto)
	if !ok {
		return cr, nil, false
	}
	dst, ok := c.entity(r.Destination, namespace, proto)
	if !ok {
		return cr, nil, false
	}
	cr.SrcNets, cr.NotSrcNets = src.nets, src.notNets
	cr.DstNets, cr.NotDstNets = dst.nets, dst.notNets
	cr.SrcPorts, cr.NotSrcPorts = src.ports, src.notPorts
	cr.DstPorts, cr.NotDstPorts = dst.ports, dst.notPorts
	for _, s := range src.sets {
		cr.SrcIPSets = append(cr.SrcIPSets, s.id)
	}
	for _, s := range src.notSets {
		cr.NotSrcIPSets = append(cr.NotSrcIPSets, s.id)
	}
	for _, s := range dst.sets {
		cr.DstIPSets = append(cr.DstIPSets, s.id)
	}
	for _, s := range dst.notSets {
		cr.NotDstIPSets = append(cr.NotDstIPSets, s.id)
	}
	for _, s := range src.namedPorts {
		cr.SrcNamedPortIPSets = append(cr.SrcNamedPortIPSets, s.id)
	}
	for _, s := range src.notNamedPorts {
		cr.NotSrcNamedPortIPSets = append(cr.NotSrcNamedPortIPSets, s.id)
	}
	for _, s := range dst.namedPorts {
		cr.DstNamedPortIPSets = append(cr.DstNamedPortIPSets, s.id)
	}
	for _, s := range dst.notNamedPorts {
		cr.NotDstNamedPortIPSets = append(cr.NotDstNamedPortIPSets, s.id)
	}
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
	return cr, specs, true
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

func (c *ruleCompiler) entity(e v3.EntityRule, namespace, proto string) (*entity, bool) {
	out := &entity{}
	var ok bool
	if out.nets, ok = parseNets(e.Nets); !ok {
		return nil, false
	}
	if out.notNets, ok = parseNets(e.NotNets); !ok {
		return nil, false
	}
	base := &ipSetSpec{}
	sel, ok1 := c.parse(e.Selector)
	notSel, ok2 := c.parse(e.NotSelector)
	nsSel, ok3 := c.parse(e.NamespaceSelector)
	if (!ok1 && e.Selector != "") || (!ok2 && e.NotSelector != "") || (!ok3 && e.NamespaceSelector != "") {
		return nil, false
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
		base.hasSA = true
		base.saNames = slices.Sorted(slices.Values(sa.Names))
		var ok bool
		if base.saSel, ok = c.parse(sa.Selector); !ok && sa.Selector != "" {
			return nil, false
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
	for _, p := range e.Ports {
		if p.PortName != "" {
			out.namedPorts = append(out.namedPorts, namedPortSpecs(portBase, p.PortName, proto)...)
			continue
		}
		out.ports = append(out.ports, PortRange{p.MinPort, p.MaxPort})
	}
	for _, p := range e.NotPorts {
		if p.PortName != "" {
			out.notNamedPorts = append(out.notNamedPorts, namedPortSpecs(portBase, p.PortName, proto)...)
			continue
		}
		out.notPorts = append(out.notPorts, PortRange{p.MinPort, p.MaxPort})
	}
	return out, true
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
	plain := s.namespace == "" && s.nsSel == nil && !s.nsGlobal && !s.hasSA && s.namedPort == ""
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
			log.WithError(err).WithField("net", s).Warn("Ignoring a rule with a bad net")
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
