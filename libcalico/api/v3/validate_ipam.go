package v3

import (
	"fmt"
	"net/netip"
	"strings"
)

// Link-local ranges may not hold IP pools.
var (
	linkLocalV4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocalV6 = netip.MustParsePrefix("fe80::/10")
)

func (v *validator) ipPool(s *IPPoolSpec) {
	if s.CIDR == "" {
		v.fail("spec.cidr", nil, "a CIDR is required")
	}
	p, ok := netip.Prefix{}, false
	if s.CIDR != "" {
		p, ok = v.cidr("spec.cidr", s.CIDR, 0)
	}
	if ok {
		ll := linkLocalV4
		if p.Addr().Is6() {
			ll = linkLocalV6
		}
		if ll.Overlaps(p) {
			v.fail("spec.cidr", s.CIDR, "overlaps the link-local range %s", ll)
		}
	}
	if s.BlockSize != 0 && ok {
		lo, hi := 20, 32
		if p.Addr().Is6() {
			lo, hi = 116, 128
		}
		switch {
		case s.BlockSize < lo || s.BlockSize > hi:
			v.fail("spec.blockSize", s.BlockSize, "want %d-%d for an IPv%d pool", lo, hi, ipVersionOf(p.Addr()))
		case s.BlockSize < p.Bits() && !s.Disabled:
			v.fail("spec.cidr", s.CIDR, "IP pool size is too small for use with Calico IPAM. It must be equal to or greater than the block size.")
		}
	}
	v.oneOf("spec.ipipMode", string(s.IPIPMode), string(EncapAlways), string(EncapCrossSubnet), string(EncapNever))
	v.oneOf("spec.vxlanMode", string(s.VXLANMode), string(EncapAlways), string(EncapCrossSubnet), string(EncapNever))
	ipip := s.IPIPMode != "" && s.IPIPMode != EncapNever
	vxlan := s.VXLANMode != "" && s.VXLANMode != EncapNever
	if ipip && vxlan {
		v.fail("spec", nil, "ipipMode %q and vxlanMode %q cannot both be enabled", s.IPIPMode, s.VXLANMode)
	}
	if ipip && ok && p.Addr().Is6() {
		v.fail("spec.ipipMode", string(s.IPIPMode), "IP-in-IP is not supported on IPv6 pools")
	}
	if s.IPIP != nil {
		v.oneOf("spec.ipip.mode", string(s.IPIP.Mode), string(EncapAlways), string(EncapCrossSubnet))
	}
	v.selector("spec.nodeSelector", s.NodeSelector)
	lb, other := false, false
	for i, u := range s.AllowedUses {
		f := fmt.Sprintf("spec.allowedUses[%d]", i)
		switch u {
		case IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel:
			other = true
		case IPPoolAllowedUseLoadBalancer:
			lb = true
		default:
			v.fail(f, string(u), "want one of Workload, Tunnel, LoadBalancer")
		}
	}
	if lb && other {
		v.fail("spec.allowedUses", nil, "LoadBalancer cannot be combined with Workload or Tunnel")
	}
	if lb && (ipip || vxlan) {
		v.fail("spec.allowedUses", nil, "LoadBalancer pools cannot use IP-in-IP or VXLAN")
	}
	if lb && s.NodeSelector != "all()" {
		v.fail("spec.nodeSelector", s.NodeSelector, "IP pools with the LoadBalancer allowed use must have nodeSelector all()")
	}
	v.selector("spec.namespaceSelector", s.NamespaceSelector)
	for _, sel := range []struct{ field, value string }{{"spec.nodeSelector", s.NodeSelector}, {"spec.namespaceSelector", s.NamespaceSelector}} {
		if strings.Contains(sel.value, "global(") {
			v.fail(sel.field, sel.value, globalSelectorEntRule)
		}
	}

	if s.AssignmentMode != nil {
		v.oneOf("spec.assignmentMode", string(*s.AssignmentMode), string(AssignmentAutomatic), string(AssignmentManual))
	}
}

func ipVersionOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

func (v *validator) ipReservation(s *IPReservationSpec) {
	for i, c := range s.ReservedCIDRs {
		f := fmt.Sprintf("spec.reservedCIDRs[%d]", i)
		if _, err := netip.ParsePrefix(c); err == nil {
			continue
		}
		if a, err := netip.ParseAddr(c); err == nil {
			v.fail(f, c, "a bare address is not a CIDR (Calico's schema wants one): write %s/%d", c, a.BitLen())
			continue
		}
		v.fail(f, c, "invalid CIDR")
	}
}

func (v *validator) ipamConfig(c *IPAMConfiguration) {
	if c.Name != IPAMConfigName {
		v.fail("metadata.name", c.Name, "the only allowed name is %q", IPAMConfigName)
	}
	if c.Spec.MaxBlocksPerHost < 0 {
		v.fail("spec.maxBlocksPerHost", c.Spec.MaxBlocksPerHost, "must be greater than or equal to 0")
	}
	if n := c.Spec.IPCooldownSeconds; n != nil && *n < 0 {
		v.fail("spec.ipCooldownSeconds", *n, "should be greater than or equal to 0")
	}
	v.enum("spec.kubeVirtVMAddressPersistence", deref(c.Spec.KubeVirtVMAddressPersistence), "Enabled", "Disabled")
}
