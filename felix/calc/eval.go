package calc

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// This file is the one definition of what the compiled policy means for a
// packet: which Rules match it and how tiers, policies, profiles, Pass,
// Log and the end-of-tier default decide. felix/rules renders the same
// meaning into iptables chains; the explainer (explain.go) and the tests
// that compare the two on real packets use this. It is pure.

// Packet is one packet as policy sees it: its addresses, its IP protocol,
// and its ports (TCP, UDP, SCTP, UDP-Lite) or its ICMP type and code
// (ICMP, ICMPv6). Policy decides on a connection's first packet; the
// replies of an allowed connection pass by conntrack.
type Packet struct {
	Src, Dst           netip.Addr
	Protocol           uint8
	SrcPort, DstPort   uint16
	ICMPType, ICMPCode uint8
}

// Family is 4 or 6.
func (p Packet) Family() int {
	if p.Src.Is4() {
		return 4
	}
	return 6
}

// HasPorts reports whether the protocol has ports.
func (p Packet) HasPorts() bool { return ProtocolHasPorts(p.Protocol) }

// IsICMP reports whether the packet is ICMP of its family.
func (p Packet) IsICMP() bool {
	return p.Protocol == 1 && p.Family() == 4 || p.Protocol == 58 && p.Family() == 6
}

// ProtocolHasPorts reports whether an IP protocol has ports that rules
// match (TCP, UDP, SCTP, UDP-Lite).
func ProtocolHasPorts(p uint8) bool { return p == 6 || p == 17 || p == 132 || p == 136 }

// ProtocolName is how rules and iptables name a protocol number: tcp, udp,
// icmp, icmpv6, sctp, udplite, or the number.
func ProtocolName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return strconv.Itoa(int(p))
}

// Membership says whether an address is in an IP set a rule refers to,
// as the kernel's set would: for a hash:net set, whether a member contains
// addr; for a hash:ip,port set (named ports), whether addr with proto and
// port is a member. Describe names a set for people ("selector app ==
// 'web' in namespace prod").
type Membership interface {
	InSet(id string, addr netip.Addr, proto uint8, port uint16) bool
	Describe(id string) string
}

// Miss is why a rule did not match a packet: the first of its fields (in
// the order the renderer writes them) that the packet fails.
type Miss struct {
	// Field is the rule field, as in projectcalico.org/v3 (protocol,
	// source.nets, destination.selector, destination.ports, icmp, ...).
	Field string `json:"field"`
	// Reason says what did not hold, naming the address, port or set.
	Reason string `json:"reason"`
}

// MatchRule reports whether r matches p, given the IP sets' membership;
// when it does not, the Miss names why.
func MatchRule(r Rule, p Packet, m Membership) (bool, *Miss) {
	fam := p.Family()
	miss := func(field, format string, a ...any) (bool, *Miss) {
		return false, &Miss{Field: field, Reason: fmt.Sprintf(format, a...)}
	}
	if r.IPVersion != 0 && r.IPVersion != fam {
		return miss("ipVersion", "the rule is for IPv%d only, the packet is IPv%d", r.IPVersion, fam)
	}
	if r.Protocol != 0 && r.Protocol != p.Protocol {
		return miss("protocol", "protocol %s is not %s", ProtocolName(p.Protocol), ProtocolName(r.Protocol))
	}
	if r.NotProtocol != 0 && r.NotProtocol == p.Protocol {
		return miss("notProtocol", "protocol %s is excluded", ProtocolName(p.Protocol))
	}
	sides := []struct {
		name                   string
		addr                   netip.Addr
		port                   uint16
		nets, notNets          []netip.Prefix
		sets, notSets          []string
		ports, notPorts        []PortRange
		namedPorts, notNamedPs []string
	}{
		{"source", p.Src, p.SrcPort, r.SrcNets, r.NotSrcNets, r.SrcIPSets, r.NotSrcIPSets, r.SrcPorts, r.NotSrcPorts, r.SrcNamedPortIPSets, r.NotSrcNamedPortIPSets},
		{"destination", p.Dst, p.DstPort, r.DstNets, r.NotDstNets, r.DstIPSets, r.NotDstIPSets, r.DstPorts, r.NotDstPorts, r.DstNamedPortIPSets, r.NotDstNamedPortIPSets},
	}
	// Nets first: a rule whose nets are all of the other family has no
	// iptables rule in this family at all.
	for _, s := range sides {
		if len(s.nets) == 0 {
			continue
		}
		own := familyNets(s.nets, fam)
		if len(own) == 0 {
			return miss(s.name+".nets", "every %s net is IPv%d, the packet is IPv%d", s.name, 10-fam, fam)
		}
		if !slices.ContainsFunc(own, func(n netip.Prefix) bool { return n.Contains(s.addr) }) {
			return miss(s.name+".nets", "%s %s is in none of %s", s.name, s.addr, prefixList(own))
		}
	}
	for _, s := range sides {
		for _, n := range familyNets(s.notNets, fam) {
			if n.Contains(s.addr) {
				return miss(s.name+".notNets", "%s %s is in excluded net %s", s.name, s.addr, n)
			}
		}
	}
	for _, s := range sides {
		for _, id := range s.sets {
			if !m.InSet(id, s.addr, p.Protocol, s.port) {
				return miss(s.name+".selector", "%s %s is not in the set of %s", s.name, s.addr, m.Describe(id))
			}
		}
		for _, id := range s.notSets {
			if m.InSet(id, s.addr, p.Protocol, s.port) {
				return miss(s.name+".notSelector", "%s %s is in the excluded set of %s", s.name, s.addr, m.Describe(id))
			}
		}
	}
	for _, s := range sides {
		for _, pr := range s.notPorts {
			if pr.contains(s.port) {
				return miss(s.name+".notPorts", "%s port %d is excluded (%s)", s.name, s.port, pr)
			}
		}
		for _, id := range s.notNamedPs {
			if m.InSet(id, s.addr, p.Protocol, s.port) {
				return miss(s.name+".notPorts", "%s %s port %d is the excluded %s", s.name, s.addr, s.port, m.Describe(id))
			}
		}
	}
	if r.ICMPType != nil && !icmpMatches(r.ICMPType, r.ICMPCode, p) {
		return miss("icmp", "ICMP type %d code %d is not %s", p.ICMPType, p.ICMPCode, icmpText(r.ICMPType, r.ICMPCode))
	}
	if r.NotICMPType != nil && icmpMatches(r.NotICMPType, r.NotICMPCode, p) {
		return miss("notICMP", "ICMP type %d code %d is excluded (%s)", p.ICMPType, p.ICMPCode, icmpText(r.NotICMPType, r.NotICMPCode))
	}
	for _, s := range sides {
		if len(s.ports) == 0 && len(s.namedPorts) == 0 {
			continue
		}
		ok := slices.ContainsFunc(s.ports, func(pr PortRange) bool { return pr.contains(s.port) }) ||
			slices.ContainsFunc(s.namedPorts, func(id string) bool { return m.InSet(id, s.addr, p.Protocol, s.port) })
		if !ok {
			var want []string
			for _, pr := range s.ports {
				want = append(want, pr.String())
			}
			for _, id := range s.namedPorts {
				want = append(want, m.Describe(id))
			}
			return miss(s.name+".ports", "%s port %d is not %s", s.name, s.port, strings.Join(want, " or "))
		}
	}
	return true, nil
}

func (pr PortRange) contains(port uint16) bool { return pr.Min <= port && port <= pr.Max }

// String is "80" or "8000:8080".
func (pr PortRange) String() string {
	if pr.Min == pr.Max {
		return strconv.Itoa(int(pr.Min))
	}
	return fmt.Sprintf("%d:%d", pr.Min, pr.Max)
}

func familyNets(nets []netip.Prefix, fam int) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nets {
		if n.Addr().Is4() == (fam == 4) {
			out = append(out, n)
		}
	}
	return out
}

func prefixList(nets []netip.Prefix) string {
	s := make([]string, len(nets))
	for i, n := range nets {
		s[i] = n.String()
	}
	return strings.Join(s, ", ")
}

// icmpMatches is iptables' --icmp-type T[/C] on an ICMP packet of the
// rule's family (the rule's protocol already says which).
func icmpMatches(typ, code *uint8, p Packet) bool {
	if !p.IsICMP() || p.ICMPType != *typ {
		return false
	}
	return code == nil || p.ICMPCode == *code
}

func icmpText(typ, code *uint8) string {
	if code == nil {
		return fmt.Sprintf("type %d", *typ)
	}
	return fmt.Sprintf("type %d code %d", *typ, *code)
}

// Verdict is what policy decided for a packet.
type Verdict string

const (
	// VerdictAllow and VerdictDeny are final.
	VerdictAllow Verdict = "Allow"
	VerdictDeny  Verdict = "Deny"
	// VerdictNone is no decision: a stage that falls through to the
	// next (untracked and preDNAT policy that match nothing).
	VerdictNone Verdict = "None"
)

// RuleResult is one rule tried on the packet.
type RuleResult struct {
	// Index is the rule's position in its policy or profile's rules of
	// that direction, counting from 0.
	Index  int    `json:"index"`
	Action Action `json:"action"`
	// Name is the rule's name annotation, when it has one (the ANP or
	// BANP rule it was converted from).
	Name string `json:"name,omitempty"`
	// Matched is whether the rule matched; Miss says why not.
	Matched bool  `json:"matched"`
	Miss    *Miss `json:"miss,omitempty"`
	// Unenforced is set on a rule with a field felix cannot enforce (see
	// rules.go): Action is then what felix does with it (an Allow or Log
	// rule with one is never tried and matches nothing).
	Unenforced string `json:"unenforced,omitempty"`
	// Packets and Bytes are the dataplane's counters of the rule, when
	// a node answered.
	Packets *uint64 `json:"packets,omitempty"`
	Bytes   *uint64 `json:"bytes,omitempty"`
}

// Outcome is how a policy or profile ended for the packet.
type Outcome string

const (
	OutcomeAllow   Outcome = "Allow"
	OutcomeDeny    Outcome = "Deny"
	OutcomePass    Outcome = "Pass"
	OutcomeNoMatch Outcome = "NoMatch"
)

// PolicyResult is one policy or profile walked for the packet.
type PolicyResult struct {
	// Kind is GlobalNetworkPolicy, NetworkPolicy or Profile; Name is the
	// policy's namespace/name (name for global ones) or the profile's.
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Tier      string `json:"tier,omitempty"`
	// Rules are the rules tried, in order, up to the one that decided.
	Rules   []RuleResult `json:"rules"`
	Outcome Outcome      `json:"outcome"`
}

// TierResult is one tier walked for the packet.
type TierResult struct {
	Name          string         `json:"name"`
	DefaultAction Action         `json:"defaultAction"`
	Policies      []PolicyResult `json:"policies"`
	// Outcome is Allow or Deny when a rule of the tier decided, Pass
	// when a Pass rule or the tier's Pass default sent the packet on,
	// and Deny with EndOfTier when no policy decided and the tier's
	// default dropped it.
	Outcome   Outcome `json:"outcome"`
	EndOfTier bool    `json:"endOfTier,omitempty"`
}

// RuleRef names one rule of a policy or profile in one direction.
type RuleRef struct {
	// Kind is GlobalNetworkPolicy, NetworkPolicy or Profile.
	Kind      string `json:"kind"`
	Tier      string `json:"tier,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Direction string `json:"direction"`
	Index     int    `json:"index"`
	// RuleName is the rule's name annotation, when it has one.
	RuleName string `json:"ruleName,omitempty"`
}

// Decider is what made a side's verdict.
type Decider struct {
	// What is rule, end-of-tier, no-profile-allowed, failsafe,
	// host-to-local-workload, default-endpoint-to-host-action,
	// neighbour-discovery or no-policy (a forward stage without policy).
	What string `json:"what"`
	// Rule is the deciding rule (What is rule).
	Rule *RuleRef `json:"rule,omitempty"`
	// Tier is the tier whose default decided (What is end-of-tier).
	Tier string `json:"tier,omitempty"`
	// Text says it for people.
	Text string `json:"text"`
}

// Policies gives an evaluation the compiled policies and profiles by
// name, and the IP sets' membership.
type Policies struct {
	Policy  func(PolicyID) *Policy
	Profile func(string) *Profile
	Sets    Membership
	// Notes lists, for a policy's or profile's rules of one direction
	// (ref without Index), the rules the compiler noted: fields felix
	// cannot enforce, or rules no packet can match (nil: none known).
	Notes func(ref RuleRef) []RuleNote
}

// RuleNote is what the compiler says of one rule it could not take as
// written.
type RuleNote struct {
	Index int
	// Action is the rule's action as written.
	Action Action
	// Kept says the rule is compiled (a Deny, or a Pass turned into a
	// Deny, of what the rest of it matches); otherwise it matches
	// nothing.
	Kept bool
	Note string
}

// Chain is the result of one endpoint chain (one direction of one
// endpoint, or one of its untracked, preDNAT or forward stages): the tiers
// then the profiles, as felix/rules renders cali-tw-, cali-fw-, cali-fh-,
// cali-th-, cali-fhfw- and cali-thfw- chains.
type Chain struct {
	Tiers    []TierResult   `json:"tiers,omitempty"`
	Profiles []PolicyResult `json:"profiles,omitempty"`
	Verdict  Verdict        `json:"verdict"`
	Decider  *Decider       `json:"decider,omitempty"`
}

// EvalChain walks an endpoint chain for p: each tier with policies for the
// direction in order, each policy's rules until one decides (Allow and
// Deny decide, Pass leaves the tier, Log goes on), the tier's default at
// its end (Deny drops unless a Pass rule fired; a Pass default goes on to
// the next tier), then the profiles in order (the first Allow or Deny
// decides; a Pass ends that profile), and a drop when none allowed. With
// final false (untracked and preDNAT stages) tiers end without their
// default, there are no profiles, and no decision falls through
// (VerdictNone).
func EvalChain(tiers []TierPolicies, profiles []string, ingress bool, p Packet, pol Policies, final bool) Chain {
	var c Chain
	dir := "egress"
	if ingress {
		dir = "ingress"
	}
	for _, t := range tiers {
		ids := t.Egress
		if ingress {
			ids = t.Ingress
		}
		if len(ids) == 0 {
			continue
		}
		tr := TierResult{Name: t.Name, DefaultAction: t.DefaultAction}
		passed := false
		for _, id := range ids {
			cp := pol.Policy(id)
			if cp == nil {
				continue
			}
			rules := cp.Outbound
			if ingress {
				rules = cp.Inbound
			}
			kind := KindNameNetworkPolicy
			if id.Namespace == "" {
				kind = KindNameGlobalNetworkPolicy
			}
			ref := RuleRef{Kind: kind, Tier: id.Tier, Namespace: id.Namespace, Name: id.Name, Direction: dir}
			pr, decider := evalRules(rules, ref, p, pol)
			pr.Kind, pr.Name, pr.Namespace, pr.Tier = kind, id.Name, id.Namespace, id.Tier
			tr.Policies = append(tr.Policies, pr)
			switch pr.Outcome {
			case OutcomeAllow, OutcomeDeny:
				tr.Outcome = pr.Outcome
				c.Tiers = append(c.Tiers, tr)
				c.Verdict, c.Decider = Verdict(pr.Outcome), decider
				return c
			case OutcomePass:
				passed = true
			}
			if passed {
				break
			}
		}
		switch {
		case passed:
			tr.Outcome = OutcomePass
			c.Tiers = append(c.Tiers, tr)
		case !final:
			tr.Outcome = OutcomeNoMatch
			c.Tiers = append(c.Tiers, tr)
		case t.DefaultAction == Pass:
			tr.Outcome, tr.EndOfTier = OutcomePass, true
			c.Tiers = append(c.Tiers, tr)
		default:
			tr.Outcome, tr.EndOfTier = OutcomeDeny, true
			c.Tiers = append(c.Tiers, tr)
			c.Verdict = VerdictDeny
			c.Decider = &Decider{What: "end-of-tier", Tier: t.Name,
				Text: fmt.Sprintf("end of tier %q: its policies select the endpoint but none allowed or passed the packet, so the tier's default (Deny) drops it", t.Name)}
			return c
		}
	}
	if !final {
		c.Verdict = VerdictNone
		return c
	}
	for _, name := range profiles {
		pf := pol.Profile(name)
		if pf == nil {
			continue
		}
		rules := pf.Outbound
		if ingress {
			rules = pf.Inbound
		}
		ref := RuleRef{Kind: KindNameProfile, Name: name, Direction: dir}
		pr, decider := evalRules(rules, ref, p, pol)
		pr.Kind, pr.Name = KindNameProfile, name
		c.Profiles = append(c.Profiles, pr)
		if pr.Outcome == OutcomeAllow || pr.Outcome == OutcomeDeny {
			c.Verdict, c.Decider = Verdict(pr.Outcome), decider
			return c
		}
	}
	c.Verdict = VerdictDeny
	text := "no profile allowed the packet, so it is dropped"
	if len(c.Profiles) == 0 {
		text = "no profile applies, so the packet is dropped"
		if len(c.Tiers) > 0 {
			text = "every tier passed the packet on and no profile applies, so it is dropped"
		}
	}
	c.Decider = &Decider{What: "no-profile-allowed", Text: text}
	return c
}

// Kind names in results.
const (
	KindNameGlobalNetworkPolicy = "GlobalNetworkPolicy"
	KindNameNetworkPolicy       = "NetworkPolicy"
	KindNameProfile             = "Profile"
)

// evalRules tries a policy's or profile's rules in order. Rules the
// compiler left out (an Allow or Log rule with a field felix cannot
// enforce, or one no packet can match) are listed as not matching.
func evalRules(rules []Rule, ref RuleRef, p Packet, pol Policies) (PolicyResult, *Decider) {
	pr := PolicyResult{Outcome: OutcomeNoMatch}
	var notes []RuleNote
	if pol.Notes != nil {
		notes = pol.Notes(ref)
	}
	note := func(i int) (RuleNote, bool) {
		for _, n := range notes {
			if n.Index == i {
				return n, true
			}
		}
		return RuleNote{}, false
	}
	next := 0
	dropped := func(upTo int) {
		for _, n := range notes {
			if !n.Kept && n.Index >= next && n.Index < upTo {
				pr.Rules = append(pr.Rules, RuleResult{Index: n.Index, Action: n.Action, Unenforced: n.Note,
					Miss: &Miss{Reason: "never tried: " + n.Note}})
			}
		}
		next = upTo
	}
	for _, r := range rules {
		dropped(r.Index)
		next = r.Index + 1
		ok, miss := MatchRule(r, p, pol.Sets)
		rr := RuleResult{Index: r.Index, Action: r.Action, Name: r.Name, Matched: ok, Miss: miss}
		if n, found := note(r.Index); found {
			rr.Unenforced = n.Note
		}
		pr.Rules = append(pr.Rules, rr)
		if !ok {
			continue
		}
		rref := ref
		rref.Index, rref.RuleName = r.Index, r.Name
		switch r.Action {
		case Allow:
			pr.Outcome = OutcomeAllow
		case Deny:
			pr.Outcome = OutcomeDeny
		case Pass:
			pr.Outcome = OutcomePass
		default: // Log: the packet is logged and goes on.
			continue
		}
		return pr, &Decider{What: "rule", Rule: &rref, Text: ruleText(rref, r.Action)}
	}
	dropped(1 << 30)
	return pr, nil
}

// ruleText names a deciding rule for people: its index and action, its
// name when it has one, and its policy, with the AdminNetworkPolicy or
// BaselineAdminNetworkPolicy a converted policy came from.
func ruleText(r RuleRef, action Action) string {
	s := fmt.Sprintf("rule %d (%s)", r.Index, action)
	if r.RuleName != "" {
		s += fmt.Sprintf(" %q", r.RuleName)
	}
	if r.Kind == KindNameGlobalNetworkPolicy {
		if n, ok := strings.CutPrefix(r.Name, v3.AdminNetworkPolicyNamePrefix); ok && r.Tier == v3.AdminNetworkPolicyTierName {
			s += " of AdminNetworkPolicy " + n + ","
		} else if n, ok := strings.CutPrefix(r.Name, v3.BaselineAdminNetworkPolicyNamePrefix); ok && r.Tier == v3.BaselineAdminNetworkPolicyTierName {
			s += " of BaselineAdminNetworkPolicy " + n + ","
		}
	}
	return s + " of " + refName(r)
}

// refName names a rule's policy or profile for people.
func refName(r RuleRef) string {
	switch r.Kind {
	case KindNameProfile:
		return fmt.Sprintf("profile %s (%s)", r.Name, r.Direction)
	case KindNameNetworkPolicy:
		return fmt.Sprintf("NetworkPolicy %s/%s in tier %s (%s)", r.Namespace, r.Name, r.Tier, r.Direction)
	}
	return fmt.Sprintf("GlobalNetworkPolicy %s in tier %s (%s)", r.Name, r.Tier, r.Direction)
}
