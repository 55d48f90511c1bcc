package v3

import (
	"fmt"
	"net/netip"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
)

func (v *validator) node(s *NodeSpec) {
	if b := s.BGP; b != nil && *b == (NodeBGPSpec{}) {
		v.fail("spec.bgp", nil, "Spec.BGP should not be empty")
	}
	if b := s.BGP; b != nil {
		if b.IPv4Address != "" {
			v.ipOrCIDR("spec.bgp.ipv4Address", b.IPv4Address, 4)
		}
		if b.IPv6Address != "" {
			v.ipOrCIDR("spec.bgp.ipv6Address", b.IPv6Address, 6)
		}
		if b.IPv4IPIPTunnelAddr != "" {
			v.ip("spec.bgp.ipv4IPIPTunnelAddr", b.IPv4IPIPTunnelAddr, 4)
		}
		if b.RouteReflectorClusterID != "" {
			v.ip("spec.bgp.routeReflectorClusterID", b.RouteReflectorClusterID, 4)
		}
	}
	if s.IPv4VXLANTunnelAddr != "" {
		v.ip("spec.ipv4VXLANTunnelAddr", s.IPv4VXLANTunnelAddr, 4)
	}
	if s.IPv6VXLANTunnelAddr != "" {
		v.ip("spec.ipv6VXLANTunnelAddr", s.IPv6VXLANTunnelAddr, 6)
	}
	v.mac("spec.vxlanTunnelMACAddr", s.VXLANTunnelMACAddr)
	v.mac("spec.vxlanTunnelMACAddrV6", s.VXLANTunnelMACAddrV6)
	for i, o := range s.OrchRefs {
		if o.Orchestrator == "" {
			v.fail(fmt.Sprintf("spec.orchRefs[%d].orchestrator", i), nil, "an orchestrator is required")
		}
	}
	for i, a := range s.Addresses {
		f := fmt.Sprintf("spec.addresses[%d]", i)
		v.ipOrCIDR(f+".address", a.Address, 0)
		// Calico stores a type it does not know; Palisade refuses it, as no
		// part of either reads such an address (docs/not-acted-on.md).
		switch a.Type {
		case "", NodeAddressInternalIP, NodeAddressExternalIP, NodeAddressCalicoNodeIP:
		default:
			v.fail(f+".type", string(a.Type), "want one of InternalIP, ExternalIP, CalicoNodeIP: Calico stores another type, but nothing reads an address of it")
		}
	}
	if w := s.Wireguard; w != nil {
		if w.InterfaceIPv4Address != "" {
			v.ip("spec.wireguard.interfaceIPv4Address", w.InterfaceIPv4Address, 4)
		}
		if w.InterfaceIPv6Address != "" {
			v.ip("spec.wireguard.interfaceIPv6Address", w.InterfaceIPv6Address, 6)
		}
	}
}

func (v *validator) workloadEndpoint(s *WorkloadEndpointSpec) {
	if s.Node == "" {
		v.fail("spec.node", nil, "a node is required")
	} else if msg := dnsSubdomainProblem(s.Node); msg != "" {
		v.fail("spec.node", s.Node, "invalid node name: %s", msg)
	}
	if s.InterfaceName == "" {
		v.fail("spec.interfaceName", nil, "an interface name is required (Calico's interface tag refuses an empty one)")
	} else if s.InterfaceName != "*" && !interfaceRE().MatchString(s.InterfaceName) {
		v.tag("spec.interfaceName", s.InterfaceName, "interface")
	}
	if s.ContainerID != "" && !containerIDRE().MatchString(s.ContainerID) {
		v.tag("spec.containerID", s.ContainerID, "containerID")
	}
	v.mac("spec.mac", s.MAC)
	var nets []netip.Prefix
	for i, n := range s.IPNetworks {
		f := fmt.Sprintf("spec.ipNetworks[%d]", i)
		if p, ok := v.ipOrCIDR(f, n, 0); ok {
			if p.Bits() != p.Addr().BitLen() {
				v.fail(f, n, "IP network contains multiple addresses")
			}
			nets = append(nets, p)
		}
	}
	for i, nat := range s.IPNATs {
		f := fmt.Sprintf("spec.ipNATs[%d]", i)
		in, okIn := v.natIP(f+".internalIP", nat.InternalIP)
		ex, okEx := v.natIP(f+".externalIP", nat.ExternalIP)
		if okIn && okEx && in.Is4() != ex.Is4() {
			v.fail(f, nil, "internalIP %s and externalIP %s are of different IP versions", in, ex)
		}
		if okIn && !containsAddr(nets, in) {
			v.fail(f+".internalIP", nat.InternalIP, "not one of the endpoint's ipNetworks")
		}
	}
	if s.IPv4Gateway != "" {
		v.ip("spec.ipv4Gateway", s.IPv4Gateway, 4)
	}
	if s.IPv6Gateway != "" {
		v.ip("spec.ipv6Gateway", s.IPv6Gateway, 6)
	}
	v.names("spec.profiles", s.Profiles, profileNameRE())
	for i, p := range s.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		v.endpointPort(f, p.Name, p.Protocol, p.Port)
		if p.HostIP != "" {
			v.ip(f+".hostIP", p.HostIP, 0)
		}
	}
	v.nets("spec.allowSpoofedSourcePrefixes", s.AllowSpoofedSourcePrefixes, 0)
}

// natIP checks a required address of an IP NAT.
func (v *validator) natIP(field, s string) (netip.Addr, bool) {
	if s == "" {
		v.fail(field, nil, "an IP address is required")
		return netip.Addr{}, false
	}
	return v.ip(field, s, 0)
}

func containsAddr(nets []netip.Prefix, a netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

func (v *validator) hostEndpoint(s *HostEndpointSpec) {
	if s.Node == "" {
		v.fail("spec.node", nil, "a node is required")
	} else if msg := dnsSubdomainProblem(s.Node); msg != "" {
		v.fail("spec.node", s.Node, "invalid node name: %s", msg)
	}
	switch {
	case s.InterfaceName == "" && len(s.ExpectedIPs) == 0:
		v.fail("spec", nil, "interfaceName or expectedIPs is required")
	case s.InterfaceName != "" && s.InterfaceName != "*" && !interfaceRE().MatchString(s.InterfaceName):
		v.tag("spec.interfaceName", s.InterfaceName, "interface")
	}
	for i, ip := range s.ExpectedIPs {
		v.ip(fmt.Sprintf("spec.expectedIPs[%d]", i), ip, 0)
	}
	v.names("spec.profiles", s.Profiles, profileNameRE())
	for i, p := range s.Ports {
		v.endpointPort(fmt.Sprintf("spec.ports[%d]", i), p.Name, p.Protocol, p.Port)
	}
}

// endpointPort checks a named port: a valid name, a protocol with ports
// and a non-zero port.
func (v *validator) endpointPort(f, name string, proto numorstring.Protocol, port uint16) {
	if name == "" {
		v.fail(f+".name", nil, "a port name is required")
	} else if err := numorstring.NamedPort(name).Validate(); err != nil {
		v.failErr(f+".name", err)
	}
	if proto == (numorstring.Protocol{}) {
		v.fail(f+".protocol", nil, "a protocol is required (TCP, UDP or SCTP)")
	} else if err := proto.Validate(); err != nil {
		v.failErr(f+".protocol", err)
	} else if !proto.SupportsPorts() {
		v.fail(f+".protocol", proto.String(), "named ports need TCP, UDP or SCTP")
	}
	if port == 0 {
		v.fail(f+".port", nil, "a port 1-65535 is required")
	}
}
