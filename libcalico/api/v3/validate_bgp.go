package v3

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

func (v *validator) bgpConfig(c *BGPConfiguration) {
	s := &c.Spec
	isDefault := v.defaultOrNode(c.Name)
	if !isDefault {
		for _, c := range []struct {
			field string
			set   bool
		}{
			{"spec.nodeToNodeMeshEnabled", s.NodeToNodeMeshEnabled != nil},
			{"spec.asNumber", s.ASNumber != nil},
			{"spec.serviceClusterIPs", len(s.ServiceClusterIPs) > 0},
			{"spec.serviceExternalIPs", len(s.ServiceExternalIPs) > 0},
			{"spec.serviceLoadBalancerIPs", len(s.ServiceLoadBalancerIPs) > 0},
		} {
			if c.set {
				v.fail(c.field, nil, "may only be set in the \"default\" BGPConfiguration")
			}
		}
	}
	v.pattern("spec.logSeverityScreen", s.LogSeverityScreen, "Trace|Debug|Info|Warning|Error|Fatal|Panic")
	if !s.NodeToNodeMesh() && s.NodeMeshPassword != nil {
		v.fail("spec.nodeMeshPassword", nil, "spec.NodeMeshPassword cannot be set if spec.NodeToNodeMesh is disabled")
	}
	if !s.NodeToNodeMesh() && s.NodeMeshMaxRestartTime != nil {
		v.fail("spec.nodeMeshMaxRestartTime", nil, "spec.NodeMeshMaxRestartTime cannot be set if spec.NodeToNodeMesh is disabled")
	}
	if len(s.Communities) > 0 && len(s.PrefixAdvertisements) == 0 {
		v.fail("spec.communities", nil, "communities are defined but not used in Spec.PrefixAdvertisement[].")
	}
	v.enum("spec.serviceLoadBalancerAggregation", deref(s.ServiceLoadBalancerAggregation), "Enabled", "Disabled")
	v.intRange("spec.ipv4NormalRoutePriority", s.IPv4NormalRoutePriority, 1, 2147483646)
	v.intRange("spec.ipv6NormalRoutePriority", s.IPv6NormalRoutePriority, 1, 2147483646)
	for i, b := range s.ServiceClusterIPs {
		v.cidr(fmt.Sprintf("spec.serviceClusterIPs[%d].cidr", i), b.CIDR, 0)
	}
	for i, b := range s.ServiceExternalIPs {
		v.cidr(fmt.Sprintf("spec.serviceExternalIPs[%d].cidr", i), b.CIDR, 0)
	}
	for i, b := range s.ServiceLoadBalancerIPs {
		v.cidr(fmt.Sprintf("spec.serviceLoadBalancerIPs[%d].cidr", i), b.CIDR, 0)
	}
	v.password("spec.nodeMeshPassword", s.NodeMeshPassword)
	v.duration("spec.nodeMeshMaxRestartTime", s.NodeMeshMaxRestartTime)
	defined := map[string]bool{}
	for i, cm := range s.Communities {
		f := fmt.Sprintf("spec.communities[%d]", i)
		if cm.Name == "" || !dns1123SubdomainRE().MatchString(cm.Name) {
			v.fail(f+".name", cm.Name, "invalid community name")
		}
		if !validCommunity(cm.Value) {
			v.fail(f+".value", cm.Value, "invalid community value or format used.")
		}
		defined[cm.Name] = true
	}
	for i, pa := range s.PrefixAdvertisements {
		f := fmt.Sprintf("spec.prefixAdvertisements[%d]", i)
		v.cidr(f+".cidr", pa.CIDR, 0)
		for j, c := range pa.Communities {
			if !defined[c] && !validCommunity(c) {
				v.fail(fmt.Sprintf("%s.communities[%d]", f, j), c, "community used is invalid or not defined.")
			}
		}
	}
	if s.BindMode != nil {
		v.oneOf("spec.bindMode", string(*s.BindMode), string(BindModeNone), string(BindModeNodeIP))
	}
	for i, g := range s.IgnoredInterfaces {
		if g == "*" || !ignoredIfaceRE().MatchString(g) {
			v.tag(fmt.Sprintf("spec.ignoredInterfaces[%d]", i), g, "ignoredInterface")
		}
	}
	if s.LocalWorkloadPeeringIPV4 != "" {
		v.ip("spec.localWorkloadPeeringIPV4", s.LocalWorkloadPeeringIPV4, 4)
	}
	if s.LocalWorkloadPeeringIPV6 != "" {
		v.ip("spec.localWorkloadPeeringIPV6", s.LocalWorkloadPeeringIPV6, 6)
	}
	if s.ProgramClusterRoutes != nil {
		v.oneOf("spec.programClusterRoutes", *s.ProgramClusterRoutes, "Enabled", "Disabled")
	}
}

// validCommunity accepts standard (aa:nn, 16-bit parts) and large
// (aa:nn:mm, 32-bit parts) community values.
func validCommunity(s string) bool {
	parts := strings.Split(s, ":")
	bits := 0
	switch len(parts) {
	case 2:
		bits = 16
	case 3:
		bits = 32
	default:
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, bits); err != nil {
			return false
		}
	}
	return true
}

func (v *validator) password(field string, p *BGPPassword) {
	if p == nil {
		return
	}
	switch {
	case p.SecretKeyRef == nil && p.Value == "":
		v.fail(field, nil, "secretKeyRef or value is required")
		return
	case p.SecretKeyRef != nil && p.Value != "":
		v.fail(field, nil, "set secretKeyRef or value, not both")
		return
	case p.SecretKeyRef == nil:
		if len(p.Value) > 80 {
			v.fail(field+".value", nil, "TCP MD5 passwords are at most 80 characters")
		}
		return
	}
	if p.SecretKeyRef.Name == "" {
		v.fail(field+".secretKeyRef.name", nil, "a secret name is required")
	}
	if p.SecretKeyRef.Key == "" {
		v.fail(field+".secretKeyRef.key", nil, "a key is required")
	}
}

func (v *validator) duration(field string, d *Duration) {
	if d != nil && d.Duration < 0 {
		v.fail(field, d.Duration.String(), "must not be negative")
	}
}

var filterNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`) })

func (v *validator) bgpPeer(s *BGPPeerSpec) {
	if s.Node != "" && s.NodeSelector != "" {
		v.fail("spec.node", s.Node, "Node field must be empty when NodeSelector is specified")
	}
	if s.PeerIP != "" && s.PeerSelector != "" {
		v.fail("spec.peerIP", s.PeerIP, "PeerIP field must be empty when PeerSelector is specified")
	}
	if s.ASNumber != 0 && s.PeerSelector != "" {
		v.fail("spec.asNumber", s.ASNumber.String(), "ASNumber field must be empty when PeerSelector is specified")
	}
	if s.PeerIP == "" && s.PeerSelector == "" && s.LocalWorkloadSelector == "" {
		v.fail("spec", nil, "one of peerIP, peerSelector or localWorkloadSelector is required")
	}
	// Calico's CRD rules for a peering with local workloads.
	if s.LocalWorkloadSelector != "" {
		if s.PeerIP != "" {
			v.fail("spec.peerIP", s.PeerIP, "peerIP must be empty when localWorkloadSelector is set")
		}
		if s.PeerSelector != "" {
			v.fail("spec.peerSelector", s.PeerSelector, "peerSelector must be empty when localWorkloadSelector is set")
		}
		if s.ASNumber == 0 {
			v.fail("spec.asNumber", nil, "asNumber is required when localWorkloadSelector is set")
		}
	}
	if s.Node != "" {
		if msg := dnsSubdomainProblem(s.Node); msg != "" {
			v.fail("spec.node", s.Node, "invalid node name: %s", msg)
		}
	}
	if s.ASNumber > math.MaxInt32 {
		v.fail("spec.asNumber", s.ASNumber.String(), "want 0-2147483647: Calico's schema stores a BGPPeer's asNumber as a 32-bit signed integer")
	}
	if s.PeerIP != "" {
		if _, _, err := SplitPeerIP(s.PeerIP); err != nil {
			v.fail("spec.peerIP", s.PeerIP, "%v", err)
		}
		if s.ASNumber == 0 {
			v.fail("spec.asNumber", nil, "an AS number is required with peerIP")
		}
	}
	v.selector("spec.nodeSelector", s.NodeSelector)
	v.selector("spec.peerSelector", s.PeerSelector)
	v.selector("spec.localWorkloadSelector", s.LocalWorkloadSelector)
	v.password("spec.password", s.Password)
	v.oneOf("spec.sourceAddress", string(s.SourceAddress), string(SourceAddressUseNodeIP), string(SourceAddressNone))
	v.duration("spec.maxRestartTime", s.MaxRestartTime)
	v.duration("spec.keepaliveTime", s.KeepaliveTime)
	if n := s.NumAllowedLocalASNumbers; n != nil && (*n < 0 || *n > 10) {
		v.fail("spec.numAllowedLocalASNumbers", *n, "want 0-10")
	}
	if s.ReachableBy != "" {
		rb, err := netip.ParseAddr(s.ReachableBy)
		switch {
		case err != nil:
			v.fail("spec.reachableBy", s.ReachableBy, "ReachableBy is invalid address")
		case s.PeerIP == "":
			v.fail("spec.reachableBy", s.ReachableBy, "ReachableBy requires PeerIP")
		default:
			if peer, _, err := SplitPeerIP(s.PeerIP); err == nil && peer.Is4() != rb.Is4() {
				v.fail("spec.reachableBy", s.ReachableBy, "ReachableBy and PeerIP address family mismatched")
			}
		}
	}
	v.names("spec.filters", s.Filters, filterNameRE())
	if s.NextHopMode != nil {
		v.oneOf("spec.nextHopMode", string(*s.NextHopMode), string(NextHopAuto), string(NextHopSelf), string(NextHopKeep))
		if s.KeepOriginalNextHop && *s.NextHopMode != NextHopKeep && *s.NextHopMode != NextHopAuto {
			v.fail("spec.keepOriginalNextHop", nil, "contradicts nextHopMode %q", *s.NextHopMode)
		}
	}
	if s.ReversePeering != nil {
		v.oneOf("spec.reversePeering", string(*s.ReversePeering), string(ReversePeeringAuto), string(ReversePeeringManual))
	}
}

// SplitPeerIP splits a BGPPeer peerIP into the address and the port: an
// address alone ("10.0.0.1", "aa::1") has port 0; with a port it is
// written "10.0.0.1:1790" or "[aa::1]:1790".
func SplitPeerIP(s string) (netip.Addr, uint16, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a, 0, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("want an IP address, optionally with a port: 10.0.0.1, 10.0.0.1:179 or [aa::1]:179")
	}
	if ap.Port() == 0 {
		return netip.Addr{}, 0, fmt.Errorf("port 0 is not valid, want 1-65535")
	}
	return ap.Addr().Unmap(), ap.Port(), nil
}

// bgpFilterInterfaceRE is the interface pattern of a BGPFilter rule, as
// Calico's bgpFilterInterface tag takes it: 1-15 letters, digits, '_',
// '.', '-' and the wildcard '*'.
var bgpFilterInterfaceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_.*-]{1,15}$`) })

// filterCommunity checks a community of a BGPFilter rule: "aa:nn" with
// 16-bit parts or "aa:nn:mm" with 32-bit parts (no names).
func (v *validator) filterCommunity(field, s string) {
	if s == "" || !validCommunity(s) {
		v.fail(field, s, "want a community aa:nn (16-bit values) or aa:nn:mm (32-bit values)")
	}
}

func (v *validator) bgpFilter(s *BGPFilterSpec) {
	check := func(field string, i int, r BGPFilterRuleV6, version int) {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.oneOf(f+".action", string(r.Action), string(BGPFilterAccept), string(BGPFilterReject))
		if r.Action == "" {
			v.fail(f+".action", nil, "an action is required (Accept or Reject)")
		}
		v.oneOf(f+".matchOperator", string(r.MatchOperator), string(MatchOperatorEqual), string(MatchOperatorNotEqual),
			string(MatchOperatorIn), string(MatchOperatorNotIn))
		v.oneOf(f+".source", string(r.Source), string(BGPFilterSourceRemotePeers))
		if r.CIDR != "" {
			v.cidr(f+".cidr", r.CIDR, version)
		}
		if (r.CIDR == "") != (r.MatchOperator == "") {
			v.fail(f, nil, "cidr and matchOperator must be set together")
		}
		if r.Interface != "" && r.Interface != "*" && !bgpFilterInterfaceRE().MatchString(r.Interface) {
			v.tag(f+".interface", r.Interface, "bgpFilterInterface")
		}
		v.oneOf(f+".peerType", string(r.PeerType), string(BGPFilterPeerTypeEBGP), string(BGPFilterPeerTypeIBGP))
		if c := r.Communities; c != nil {
			if len(c.Values) != 1 {
				v.fail(f+".communities.values", nil, "want exactly one community value, have %d", len(c.Values))
			}
			for j, val := range c.Values {
				v.filterCommunity(fmt.Sprintf("%s.communities.values[%d]", f, j), val)
			}
		}
		if p := r.Priority; p != nil && (*p < 1 || *p > 2147483646) {
			v.fail(f+".priority", *p, "want 1-2147483646")
		}
		if len(r.Operations) > 0 && r.Action != BGPFilterAccept {
			v.fail(f+".operations", nil, "operations may only be used with action Accept")
		}
		if len(r.Operations) > 10 {
			v.fail(f+".operations", nil, "Too many: %d: must have at most 10 items", len(r.Operations))
		}
		for j, op := range r.Operations {
			of := fmt.Sprintf("%s.operations[%d]", f, j)
			n := 0
			if op.AddCommunity != nil {
				n++
				v.filterCommunity(of+".addCommunity.value", op.AddCommunity.Value)
			}
			if op.PrependASPath != nil {
				n++
				if l := len(op.PrependASPath.Prefix); l < 1 || l > 10 {
					v.fail(of+".prependASPath.prefix", nil, "want 1-10 AS numbers, have %d", l)
				}
			}
			if op.SetPriority != nil {
				n++
				if p := op.SetPriority.Value; p < 1 || p > 2147483646 {
					v.fail(of+".setPriority.value", p, "want 1-2147483646")
				}
			}
			if n != 1 {
				v.fail(of, nil, "exactly one operation must be set")
			}
		}
		if pl := r.PrefixLength; pl != nil {
			maxLen := int32(32)
			if version == 6 {
				maxLen = 128
			}
			if r.CIDR == "" {
				v.fail(f+".prefixLength", nil, "needs a cidr")
			}
			if n := pl.Min; n != nil && (*n < 0 || *n > maxLen) {
				v.fail(f+".prefixLength.min", *n, "want 0-%d", maxLen)
			}
			if n := pl.Max; n != nil && (*n < 0 || *n > maxLen) {
				v.fail(f+".prefixLength.max", *n, "want 0-%d", maxLen)
			}
			if pl.Min != nil && pl.Max != nil && *pl.Min > *pl.Max {
				v.fail(f+".prefixLength", nil, "min %d is above max %d", *pl.Min, *pl.Max)
			}
		}
	}
	for i, r := range s.ExportV4 {
		check("spec.exportV4", i, BGPFilterRuleV6(r), 4)
	}
	for i, r := range s.ImportV4 {
		check("spec.importV4", i, BGPFilterRuleV6(r), 4)
	}
	for i, r := range s.ExportV6 {
		check("spec.exportV6", i, r, 6)
	}
	for i, r := range s.ImportV6 {
		check("spec.importV6", i, r, 6)
	}
}
