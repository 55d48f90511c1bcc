package v3

import (
	"net/netip"
	"reflect"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
)

// Default block sizes of IP pools.
const (
	DefaultIPv4BlockSize = 26
	DefaultIPv6BlockSize = 122
)

// DefaultNamespace is the namespace calicoctl gives namespaced resources
// that name none.
const DefaultNamespace = "default"

// Default fills in what Calico fills in when a resource is created: the
// kind and apiVersion, the namespace of namespaced kinds, IP pool block
// size, encapsulation modes, node selector, allowed uses and assignment
// mode, policy tier and types, tier default action and IPAM block
// auto-allocation. It leaves alone what Calico leaves unset (for example
// BGPConfiguration's AS number and mesh switch, which the BGP layer
// defaults; see BGPConfigurationSpec.AS and NodeToNodeMesh). Default is
// idempotent.
func Default(r Resource) {
	info, ok := KindOf(r)
	if !ok {
		return
	}
	tm := r.GetTypeMeta()
	tm.Kind, tm.APIVersion = info.Kind, APIVersion
	if info.Namespaced && r.GetObjectMeta().Namespace == "" {
		r.GetObjectMeta().Namespace = DefaultNamespace
	}
	switch x := r.(type) {
	case *IPPool:
		defaultIPPool(&x.Spec)
	case *NetworkPolicy:
		x.Spec.Tier = defaultTier(x.Spec.Tier)
		x.Spec.Types = defaultTypes(x.Spec.Types, x.Spec.Ingress, x.Spec.Egress)
		defaultRules(x.Spec.Ingress, x.Spec.Egress)
		setLabel(&x.ObjectMeta, LabelTier, x.Spec.Tier)
	case *GlobalNetworkPolicy:
		x.Spec.Tier = defaultTier(x.Spec.Tier)
		x.Spec.Types = defaultTypes(x.Spec.Types, x.Spec.Ingress, x.Spec.Egress)
		defaultRules(x.Spec.Ingress, x.Spec.Egress)
		setLabel(&x.ObjectMeta, LabelTier, x.Spec.Tier)
	case *StagedNetworkPolicy:
		x.Spec.Tier = defaultTier(x.Spec.Tier)
		if x.Spec.StagedAction == "" {
			x.Spec.StagedAction = StagedActionSet
		}
		if x.Spec.StagedAction == StagedActionSet {
			x.Spec.Types = defaultTypes(x.Spec.Types, x.Spec.Ingress, x.Spec.Egress)
		}
		defaultRules(x.Spec.Ingress, x.Spec.Egress)
		setLabel(&x.ObjectMeta, LabelTier, x.Spec.Tier)
	case *StagedGlobalNetworkPolicy:
		x.Spec.Tier = defaultTier(x.Spec.Tier)
		if x.Spec.StagedAction == "" {
			x.Spec.StagedAction = StagedActionSet
		}
		if x.Spec.StagedAction == StagedActionSet {
			x.Spec.Types = defaultTypes(x.Spec.Types, x.Spec.Ingress, x.Spec.Egress)
		}
		defaultRules(x.Spec.Ingress, x.Spec.Egress)
		setLabel(&x.ObjectMeta, LabelTier, x.Spec.Tier)
	case *StagedKubernetesNetworkPolicy:
		if x.Spec.StagedAction == "" {
			x.Spec.StagedAction = StagedActionSet
		}
	case *Profile:
		defaultRules(x.Spec.Ingress, x.Spec.Egress)
	case *Tier:
		if x.Spec.DefaultAction == nil {
			deny := Deny
			x.Spec.DefaultAction = &deny
		}
		if x.Spec.Order == nil {
			order := DefaultTierOrder
			x.Spec.Order = &order
		}
	case *IPAMConfiguration:
		if x.Spec.AutoAllocateBlocks == nil {
			t := true
			x.Spec.AutoAllocateBlocks = &t
		}
	case *WorkloadEndpoint:
		setLabel(&x.ObjectMeta, LabelNamespace, x.Namespace)
		if x.Spec.Orchestrator != "" {
			setLabel(&x.ObjectMeta, LabelOrchestrator, x.Spec.Orchestrator)
		}
	case *FelixConfiguration:
		defaultFelixConfig(x)
	case *BGPConfiguration:
		defaultBGPConfig(x)
	case *KubeControllersConfiguration:
		defaultKubeControllersConfig(x)
	}
}

// canonicalCIDR returns a CIDR in canonical form, leaving host bits (which
// validation refuses where Calico does) and unparsable text alone.
func canonicalCIDR(s string) string {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return s
	}
	return p.String()
}

// defaultRules drops the empty ends of rules ("source: {}") that Calico
// does not store, by normalising empty lists to nil.
func defaultRules(lists ...[]Rule) {
	for _, rules := range lists {
		for i := range rules {
			for _, e := range []*EntityRule{&rules[i].Source, &rules[i].Destination} {
				for j, n := range e.Nets {
					e.Nets[j] = canonicalCIDR(n)
				}
				for j, n := range e.NotNets {
					e.NotNets[j] = canonicalCIDR(n)
				}
				if len(e.Nets) == 0 {
					e.Nets = nil
				}
				if len(e.NotNets) == 0 {
					e.NotNets = nil
				}
				if len(e.Ports) == 0 {
					e.Ports = nil
				}
				if len(e.NotPorts) == 0 {
					e.NotPorts = nil
				}
			}
		}
	}
}

// defaultFelixConfig fills what Calico fills on write: failsafe ports
// without a protocol are TCP, and the cluster-wide "default" configuration
// gets the BPF connect-time load balancing, host-networked NAT and floating
// IP modes Calico's schema defaults.
func defaultFelixConfig(c *FelixConfiguration) {
	for _, pp := range []*[]ProtoPort{c.Spec.FailsafeInboundHostPorts, c.Spec.FailsafeOutboundHostPorts} {
		if pp == nil {
			continue
		}
		for i := range *pp {
			if (*pp)[i].Protocol == "" {
				(*pp)[i].Protocol = "TCP"
			}
		}
	}
	if c.Spec.FloatingIPs == "" {
		c.Spec.FloatingIPs = "Disabled"
	}
	if c.Spec.BPFConnectTimeLoadBalancing == nil {
		v := "TCP"
		c.Spec.BPFConnectTimeLoadBalancing = &v
	}
	if c.Spec.BPFHostNetworkedNATWithoutCTLB == nil {
		v := "Enabled"
		c.Spec.BPFHostNetworkedNATWithoutCTLB = &v
	}
}

// defaultBGPConfig canonicalises the service CIDRs and prefix
// advertisements, as Calico stores them.
func defaultBGPConfig(c *BGPConfiguration) {
	for i := range c.Spec.ServiceClusterIPs {
		c.Spec.ServiceClusterIPs[i].CIDR = canonicalCIDR(c.Spec.ServiceClusterIPs[i].CIDR)
	}
	for i := range c.Spec.ServiceExternalIPs {
		c.Spec.ServiceExternalIPs[i].CIDR = canonicalCIDR(c.Spec.ServiceExternalIPs[i].CIDR)
	}
	for i := range c.Spec.ServiceLoadBalancerIPs {
		c.Spec.ServiceLoadBalancerIPs[i].CIDR = canonicalCIDR(c.Spec.ServiceLoadBalancerIPs[i].CIDR)
	}
	for i := range c.Spec.PrefixAdvertisements {
		c.Spec.PrefixAdvertisements[i].CIDR = canonicalCIDR(c.Spec.PrefixAdvertisements[i].CIDR)
	}
}

// defaultKubeControllersConfig fills Calico's schema defaults: Info
// logging and health checks on.
func defaultKubeControllersConfig(c *KubeControllersConfiguration) {
	if c.Spec.LogSeverityScreen == "" {
		c.Spec.LogSeverityScreen = "Info"
	}
	if c.Spec.HealthChecks == "" {
		c.Spec.HealthChecks = "Enabled"
	}
}

// KindOf returns the registered kind of a resource value.
func KindOf(r Resource) (KindInfo, bool) {
	t := reflect.TypeOf(r)
	for _, k := range kindRegistry {
		if reflect.TypeOf(k.New()) == t {
			return k, true
		}
	}
	return KindInfo{}, false
}

// defaultIPPool converts the deprecated v1 fields and fills the defaults.
func defaultIPPool(s *IPPoolSpec) {
	if s.IPIP != nil {
		if s.IPIPMode == "" {
			switch {
			case !s.IPIP.Enabled:
				s.IPIPMode = EncapNever
			case s.IPIP.Mode != "":
				s.IPIPMode = s.IPIP.Mode
			default:
				s.IPIPMode = EncapAlways
			}
		}
		s.IPIP = nil
	}
	if s.NATOutgoingV1 {
		s.NATOutgoing, s.NATOutgoingV1 = true, false
	}
	s.CIDR = canonicalCIDR(s.CIDR)
	if s.BlockSize == 0 {
		if p, err := netip.ParsePrefix(s.CIDR); err == nil {
			if p.Addr().Is4() {
				s.BlockSize = DefaultIPv4BlockSize
			} else {
				s.BlockSize = DefaultIPv6BlockSize
			}
		}
	}
	if s.IPIPMode == "" {
		s.IPIPMode = EncapNever
	}
	if s.VXLANMode == "" {
		s.VXLANMode = EncapNever
	}
	if s.NodeSelector == "" {
		s.NodeSelector = "all()"
	}
	if len(s.AllowedUses) == 0 {
		s.AllowedUses = []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}
	}
	if s.AssignmentMode == nil {
		m := AssignmentAutomatic
		s.AssignmentMode = &m
	}
}

func defaultTier(t string) string {
	if t == "" {
		return DefaultTierName
	}
	return t
}

// defaultTypes infers a policy's types from its rules when none are given:
// Egress alone when only egress rules exist, both when both exist, and
// Ingress otherwise.
func defaultTypes(types []PolicyType, ingress, egress []Rule) []PolicyType {
	if len(types) > 0 {
		return types
	}
	switch {
	case len(ingress) > 0 && len(egress) > 0:
		return []PolicyType{PolicyTypeIngress, PolicyTypeEgress}
	case len(egress) > 0:
		return []PolicyType{PolicyTypeEgress}
	default:
		return []PolicyType{PolicyTypeIngress}
	}
}

// NodeToNodeMesh reports whether the full node-to-node BGP mesh is on:
// true unless explicitly disabled.
func (s *BGPConfigurationSpec) NodeToNodeMesh() bool {
	return s == nil || s.NodeToNodeMeshEnabled == nil || *s.NodeToNodeMeshEnabled
}

// AS returns the configured AS number, or DefaultASNumber when unset.
func (s *BGPConfigurationSpec) AS() numorstring.ASNumber {
	if s == nil || s.ASNumber == nil {
		return DefaultASNumber
	}
	return *s.ASNumber
}
