package calc

import (
	"maps"
	"net/netip"
	"slices"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// localPeering is the stage that decides which local workloads are BGP
// peers of this node (a BGPPeer's localWorkloadSelector selects them, as
// Calico's active BGP peer calculator does) and the node-side addresses of
// those peerings (BGPConfiguration default's localWorkloadPeeringIPV4 and
// IPV6), which the dataplane puts on the workload's host interface: the
// workload's BGP speaker connects to them.
type localPeering struct {
	hostname   string
	peers      map[string]*v3.BGPPeer
	nodeLabels map[string]string
	ip4, ip6   netip.Addr
}

func newLocalPeering(hostname string) *localPeering {
	return &localPeering{hostname: hostname, peers: map[string]*v3.BGPPeer{}}
}

// onPeer records a BGPPeer (nil: deleted) and reports whether the
// selection of local peers may have changed.
func (lp *localPeering) onPeer(name string, p *v3.BGPPeer) bool {
	old, had := lp.peers[name]
	if p == nil || p.Spec.LocalWorkloadSelector == "" {
		delete(lp.peers, name)
		return had
	}
	lp.peers[name] = p
	return !had || old.Spec.LocalWorkloadSelector != p.Spec.LocalWorkloadSelector ||
		old.Spec.Node != p.Spec.Node || old.Spec.NodeSelector != p.Spec.NodeSelector
}

// onNode records this node's labels; other nodes do not matter.
func (lp *localPeering) onNode(name string, n *v3.Node) bool {
	if name != lp.hostname {
		return false
	}
	var labels map[string]string
	if n != nil {
		labels = n.Labels
	}
	if maps.Equal(labels, lp.nodeLabels) {
		return false
	}
	lp.nodeLabels = labels
	return len(lp.peers) > 0
}

// onConfig records BGPConfiguration default (nil: none).
func (lp *localPeering) onConfig(c *v3.BGPConfiguration) bool {
	var ip4, ip6 netip.Addr
	if c != nil {
		ip4, ip6 = c.Spec.LocalWorkloadPeeringIPs()
	}
	if ip4 == lp.ip4 && ip6 == lp.ip6 {
		return false
	}
	lp.ip4, lp.ip6 = ip4, ip6
	return true
}

// of returns the BGPPeer that makes a workload with labels a local peer
// ("" for none) and the peering addresses to put on its interface.
func (lp *localPeering) of(labels map[string]string) (string, []netip.Prefix) {
	if len(lp.peers) == 0 {
		return "", nil
	}
	peers := slices.Collect(maps.Values(lp.peers))
	p := v3.LocalWorkloadPeer(peers, lp.hostname, lp.nodeLabels, labels)
	if p == nil {
		return "", nil
	}
	var addrs []netip.Prefix
	for _, a := range []netip.Addr{lp.ip4, lp.ip6} {
		if a.IsValid() {
			addrs = append(addrs, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return p.Name, addrs
}
