package rules

import (
	"github.com/palisade-net/palisade/felix/calc"
)

// cidrBlockRules is cali-cidr-block, the end of cali-FORWARD, as Calico's
// serviceLoopPrevention: a forwarded packet still addressed to an
// advertised service range (BGPConfiguration serviceClusterIPs,
// serviceExternalIPs, serviceLoadBalancerIPs) was not translated to a
// backend by kube-proxy, so no Service answers at that address; routed
// on, it would bounce between this node and the router that sent it
// here. Drop (the default) or Reject ends it; Disabled leaves the chain
// empty.
func cidrBlockRules(cfg *calc.Config, family int) []Rule {
	action := map[string]string{"Drop": "DROP", "Reject": "REJECT"}[cfg.ServiceLoopAction]
	if action == "" {
		return nil
	}
	var out []Rule
	for _, p := range cfg.ServiceLoopRanges {
		if is6(p) == (family == 6) {
			out = append(out, Rule{Match: "-d " + p.String(), Action: action, Comment: "Advertised service range, not translated to a backend"})
		}
	}
	return out
}
