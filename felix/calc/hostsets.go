package calc

import (
	"net/netip"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Well-known IP set IDs holding nodes' addresses, as Calico's.
const (
	// IPSetAllHosts holds every node's addresses and externalNodesList:
	// the destinations natOutgoingExclusions IPPoolsAndHostIPs keeps
	// from masquerade.
	IPSetAllHosts = "all-hosts-net"
	// IPSetAllVXLAN holds the addresses of the nodes with a VXLAN tunnel
	// address of the family (where VXLAN packets may come from) and
	// externalNodesList: cali-INPUT accepts VXLAN only from them.
	IPSetAllVXLAN = "all-vxlan-net"
)

// IsNodeSet reports whether id is one of the sets the graph fills itself
// (pools and nodes' addresses) rather than from selectors.
func IsNodeSet(id string) bool {
	switch id {
	case IPSetMasqPools, IPSetAllPools, IPSetAllHosts, IPSetAllVXLAN:
		return true
	}
	return false
}

// hostSets is the calculation stage that fills IPSetAllHosts and
// IPSetAllVXLAN from Nodes and externalNodesList. Members are counted
// (two nodes may share an address, a node may be inside an external
// CIDR), so the result depends only on the current inputs.
type hostSets struct {
	x                *labelIndex
	hosts, vxlan     *ipSetState
	byNode           map[string]nodeMembers
	external         []string
	vxlan4s, vxlan6s map[string]bool // pools asking for VXLAN, by name
}

// nodeMembers is what one Node adds to each set.
type nodeMembers struct{ hosts, vxlan []string }

func newHostSets(x *labelIndex) *hostSets {
	x.ref(&ipSetSpec{id: IPSetAllHosts, pools: true})
	x.ref(&ipSetSpec{id: IPSetAllVXLAN, pools: true})
	return &hostSets{x: x, hosts: x.sets[IPSetAllHosts], vxlan: x.sets[IPSetAllVXLAN], byNode: map[string]nodeMembers{},
		vxlan4s: map[string]bool{}, vxlan6s: map[string]bool{}}
}

// onNode updates the members of a Node (nil: deleted).
func (h *hostSets) onNode(name string, n *v3.Node) {
	old := h.byNode[name]
	var now nodeMembers
	if n != nil {
		var on overlayNode
		on.read(n)
		for _, a := range []struct {
			addr   netip.Prefix
			tunnel netip.Addr
		}{{on.addr4, on.tunnel4}, {on.addr6, on.tunnel6}} {
			if !a.addr.IsValid() {
				continue
			}
			m := a.addr.Addr().String()
			now.hosts = append(now.hosts, m)
			if a.tunnel.IsValid() {
				now.vxlan = append(now.vxlan, m)
			}
		}
	}
	h.swap(h.hosts, old.hosts, now.hosts)
	h.swap(h.vxlan, old.vxlan, now.vxlan)
	if n == nil {
		delete(h.byNode, name)
	} else {
		h.byNode[name] = now
	}
}

// setExternal updates the externalNodesList members of both sets.
func (h *hostSets) setExternal(nets []netip.Prefix) {
	now := make([]string, len(nets))
	for i, p := range nets {
		now[i] = netMember(p)
	}
	h.swap(h.hosts, h.external, now)
	h.swap(h.vxlan, h.external, now)
	h.external = now
}

// swap adds now's members before removing old's, so a member in both is
// never removed from the kernel set in between.
func (h *hostSets) swap(s *ipSetState, old, now []string) {
	for _, m := range now {
		h.x.addMember(s, m)
	}
	for _, m := range old {
		h.x.removeMember(s, m)
	}
}

// onPool records whether a pool asks for VXLAN (vxlanMode other than
// Never, disabled or not, as Calico's encapsulation calculator) and
// reports whether that changed which families use VXLAN.
func (h *hostSets) onPool(name string, p *v3.IPPool) bool {
	before4, before6 := len(h.vxlan4s) > 0, len(h.vxlan6s) > 0
	delete(h.vxlan4s, name)
	delete(h.vxlan6s, name)
	if p != nil && orNever(p.Spec.VXLANMode) != v3.EncapNever {
		if cidr, err := ParseNet(p.Spec.CIDR); err == nil {
			if cidr.Addr().Is4() {
				h.vxlan4s[name] = true
			} else {
				h.vxlan6s[name] = true
			}
		}
	}
	return before4 != (len(h.vxlan4s) > 0) || before6 != (len(h.vxlan6s) > 0)
}

// encapsulation says whether pools of each family ask for VXLAN.
func (h *hostSets) encapsulation() (bool, bool) { return len(h.vxlan4s) > 0, len(h.vxlan6s) > 0 }
