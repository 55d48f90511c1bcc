package rules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// protoName is how iptables names a protocol number.
func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "ipv6-icmp"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return strconv.Itoa(int(p))
}

// ruleMatches renders the match part of a calc rule for a family. A rule
// can need several iptables rules (several positive nets, or numeric and
// named ports, are ORs); none when it cannot match in this family.
func ruleMatches(r calc.Rule, family int, m *marks) []string {
	if r.IPVersion != 0 && r.IPVersion != family {
		return nil
	}
	var fixed []string
	if r.Protocol != 0 {
		fixed = append(fixed, "-p "+protoName(r.Protocol))
	}
	switch {
	case r.NotProtocol == 0:
	case r.Protocol == r.NotProtocol:
		// protocol X and notProtocol X: a contradiction, no packet.
		return nil
	case r.Protocol == 0:
		fixed = append(fixed, "! -p "+protoName(r.NotProtocol))
	default:
		// protocol X already excludes Y, and iptables takes one -p per
		// rule: "-p X ! -p Y" fails the whole restore.
	}
	srcNets, ok := netChoices(r.SrcNets, "-s", family)
	if !ok {
		return nil
	}
	dstNets, ok := netChoices(r.DstNets, "-d", family)
	if !ok {
		return nil
	}
	if len(notNetRules(r, family, m)) > 0 {
		fixed = append(fixed, m.isScratch)
	}
	for _, id := range r.SrcIPSets {
		fixed = append(fixed, "-m set --match-set "+IPSetName(id, family)+" src")
	}
	for _, id := range r.NotSrcIPSets {
		fixed = append(fixed, "-m set ! --match-set "+IPSetName(id, family)+" src")
	}
	for _, id := range r.DstIPSets {
		fixed = append(fixed, "-m set --match-set "+IPSetName(id, family)+" dst")
	}
	for _, id := range r.NotDstIPSets {
		fixed = append(fixed, "-m set ! --match-set "+IPSetName(id, family)+" dst")
	}
	for _, chunk := range portChunks(r.NotSrcPorts) {
		fixed = append(fixed, fmt.Sprintf("-m multiport ! --source-ports %s", chunk))
	}
	for _, chunk := range portChunks(r.NotDstPorts) {
		fixed = append(fixed, fmt.Sprintf("-m multiport ! --destination-ports %s", chunk))
	}
	for _, id := range r.NotSrcNamedPortIPSets {
		fixed = append(fixed, "-m set ! --match-set "+IPSetName(id, family)+" src,src")
	}
	for _, id := range r.NotDstNamedPortIPSets {
		fixed = append(fixed, "-m set ! --match-set "+IPSetName(id, family)+" dst,dst")
	}
	fixed = append(fixed, icmpMatches(r, family)...)
	srcPorts := portChoices(r.SrcPorts, r.SrcNamedPortIPSets, "--source-ports", "src,src", family)
	dstPorts := portChoices(r.DstPorts, r.DstNamedPortIPSets, "--destination-ports", "dst,dst", family)
	var out []string
	for _, s := range srcNets {
		for _, d := range dstNets {
			for _, sp := range srcPorts {
				for _, dp := range dstPorts {
					parts := append([]string{}, fixed...)
					for _, p := range []string{s, d, sp, dp} {
						if p != "" {
							parts = append(parts, p)
						}
					}
					out = append(out, strings.Join(parts, " "))
				}
			}
		}
	}
	return out
}

func is6(p netip.Prefix) bool { return p.Addr().Is6() }

// netChoices returns the alternatives for positive nets: one empty choice
// when there are none; ok false when none is of the family.
func netChoices(nets []netip.Prefix, flag string, family int) ([]string, bool) {
	if len(nets) == 0 {
		return []string{""}, true
	}
	var out []string
	for _, n := range nets {
		if is6(n) == (family == 6) {
			out = append(out, flag+" "+n.String())
		}
	}
	return out, len(out) > 0
}

// portChoices returns the alternatives for positive ports: numeric ranges
// (in multiport chunks of at most 15) or named-port sets.
func portChoices(ports []calc.PortRange, named []string, flag, dir string, family int) []string {
	if len(ports) == 0 && len(named) == 0 {
		return []string{""}
	}
	var out []string
	for _, chunk := range portChunks(ports) {
		out = append(out, "-m multiport "+flag+" "+chunk)
	}
	for _, id := range named {
		out = append(out, "-m set --match-set "+IPSetName(id, family)+" "+dir)
	}
	return out
}

// portChunks writes ranges as multiport lists; a range counts as two of
// multiport's fifteen slots.
func portChunks(ports []calc.PortRange) []string {
	var out []string
	var cur []string
	slots := 0
	for _, p := range ports {
		s, n := strconv.Itoa(int(p.Min)), 1
		if p.Max != p.Min {
			s, n = fmt.Sprintf("%d:%d", p.Min, p.Max), 2
		}
		if slots+n > 15 {
			out = append(out, strings.Join(cur, ","))
			cur, slots = nil, 0
		}
		cur = append(cur, s)
		slots += n
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, ","))
	}
	return out
}

func icmpMatches(r calc.Rule, family int) []string {
	mod, flag := "-m icmp", "--icmp-type"
	if family == 6 {
		mod, flag = "-m icmp6", "--icmpv6-type"
	}
	tc := func(t, c *uint8) string {
		if c != nil {
			return fmt.Sprintf("%d/%d", *t, *c)
		}
		return strconv.Itoa(int(*t))
	}
	var out []string
	if r.ICMPType != nil {
		out = append(out, fmt.Sprintf("%s %s %s", mod, flag, tc(r.ICMPType, r.ICMPCode)))
	}
	if r.NotICMPType != nil {
		out = append(out, fmt.Sprintf("%s ! %s %s", mod, flag, tc(r.NotICMPType, r.NotICMPCode)))
	}
	return out
}

// notNetRules are the rules that clear the scratch mark for addresses in
// a rule's notNets. iptables allows one -s and one -d per rule, so a rule
// with notNets first sets the scratch bit, clears it for each excluded
// net, and its main rules then require the bit.
func notNetRules(r calc.Rule, family int, m *marks) []Rule {
	var out []Rule
	for _, n := range r.NotSrcNets {
		if is6(n) == (family == 6) {
			out = append(out, Rule{Match: "-s " + n.String(), Action: m.clearScratch})
		}
	}
	for _, n := range r.NotDstNets {
		if is6(n) == (family == 6) {
			out = append(out, Rule{Match: "-d " + n.String(), Action: m.clearScratch})
		}
	}
	if len(out) == 0 {
		return nil
	}
	return append([]Rule{{Action: m.setScratch}}, out...)
}
