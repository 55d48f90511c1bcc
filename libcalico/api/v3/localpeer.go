package v3

import (
	"net/netip"
	"sort"

	"github.com/palisade-net/palisade/libcalico/selector"
)

// LocalWorkloadPeer returns the BGPPeer that makes a workload a local BGP
// peer of its node, as Calico decides it: a BGPPeer with a
// localWorkloadSelector applies to the node (spec.node names it, its
// nodeSelector selects the node's labels, or it names neither) and its
// localWorkloadSelector selects the workload's labels. When several do,
// the first by name wins. Nil when none does (or a selector does not
// parse: the validator refuses those).
func LocalWorkloadPeer(peers []*BGPPeer, node string, nodeLabels, workloadLabels map[string]string) *BGPPeer {
	var match []*BGPPeer
	for _, p := range peers {
		s := &p.Spec
		if s.LocalWorkloadSelector == "" {
			continue
		}
		switch {
		case s.Node != "":
			if s.Node != node {
				continue
			}
		case s.NodeSelector != "":
			sel, err := selector.Parse(s.NodeSelector)
			if err != nil || !sel.Evaluate(nodeLabels) {
				continue
			}
		}
		sel, err := selector.Parse(s.LocalWorkloadSelector)
		if err != nil || !sel.Evaluate(workloadLabels) {
			continue
		}
		match = append(match, p)
	}
	if len(match) == 0 {
		return nil
	}
	sort.Slice(match, func(i, j int) bool { return match[i].Name < match[j].Name })
	return match[0]
}

// LocalWorkloadPeeringIPs are the node-side addresses of local workload
// peerings (BGPConfiguration localWorkloadPeeringIPV4 and IPV6), invalid
// when unset or not an address of the family.
func (s *BGPConfigurationSpec) LocalWorkloadPeeringIPs() (v4, v6 netip.Addr) {
	if s == nil {
		return
	}
	if a, err := netip.ParseAddr(s.LocalWorkloadPeeringIPV4); err == nil && a.Is4() {
		v4 = a
	}
	if a, err := netip.ParseAddr(s.LocalWorkloadPeeringIPV6); err == nil && a.Is6() {
		v6 = a
	}
	return
}
