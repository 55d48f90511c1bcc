package rules

import (
	"fmt"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// natOutgoingRules is cali-nat-outgoing, as Calico's: traffic from pools
// with natOutgoing to anywhere outside every pool (and, with
// natOutgoingExclusions IPPoolsAndHostIPs, outside the nodes' addresses
// too) is masqueraded, or SNATed to natOutgoingAddress, only when leaving
// by iptablesNATOutgoingInterfaceFilter when that is set. With a
// natPortRange, TCP and UDP get source ports from the range (each
// followed by a RETURN so the catch-all after them leaves them alone),
// other protocols the catch-all. --random-fully is on unless
// featureDetectOverride turns MASQFullyRandom (SNATFullyRandom) off.
func natOutgoingRules(n calc.NATOutgoing, family int) []Rule {
	match := fmt.Sprintf("-m set --match-set %s src -m set ! --match-set %s dst",
		IPSetName(calc.IPSetMasqPools, family), IPSetName(calc.IPSetAllPools, family))
	if n.ExcludeHosts {
		match += " -m set ! --match-set " + IPSetName(calc.IPSetAllHosts, family) + " dst"
	}
	if n.Interface != "" {
		match = "-o " + n.Interface + " " + match
	}
	random := func(on bool) string {
		if on {
			return " --random-fully"
		}
		return ""
	}
	snat := func(ports string) string {
		if n.Address.IsValid() && n.Address.Is6() == (family == 6) {
			to := n.Address.String()
			if ports != "" {
				if family == 6 {
					to = "[" + to + "]"
				}
				to += ":" + ports
			}
			return "SNAT --to-source " + to + random(n.SNATRandom)
		}
		if ports != "" {
			return "MASQUERADE --to-ports " + ports + random(n.MasqRandom)
		}
		return "MASQUERADE" + random(n.MasqRandom)
	}
	if n.PortMax == 0 {
		return []Rule{{Match: match, Action: snat("")}}
	}
	ports := fmt.Sprintf("%d-%d", n.PortMin, n.PortMax)
	var out []Rule
	for _, proto := range []string{"tcp", "udp"} {
		m := strings.TrimSpace("-p " + proto + " " + match)
		out = append(out, Rule{Match: m, Action: snat(ports)}, Rule{Match: m, Action: "RETURN"})
	}
	return append(out, Rule{Match: match, Action: snat("")})
}
