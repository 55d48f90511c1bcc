package v3

import (
	"net/netip"
	"reflect"
	"time"

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

// defaultRules normalises empty lists of rule ends to nil, as Calico drops
// them (an empty end itself, "source: {}", is stored and printed, as
// Calico does). Nets are stored as
// written (host bits, bare addresses, upper-case IPv6), as Calico stores
// them; every reader masks them.
func defaultRules(lists ...[]Rule) {
	for _, rules := range lists {
		for i := range rules {
			for _, e := range []*EntityRule{&rules[i].Source, &rules[i].Destination} {
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

// defaultFelixConfig fills what Calico fills on write, in its client
// (failsafe ports without a protocol are TCP; floating IPs, BPF
// connect-time load balancing and host-networked NAT, the last two set
// from the deprecated bpfConnectTimeLoadBalancingEnabled when it is given)
// and from its CRD schema's defaults (nftablesMode Auto, flowtable
// offload Disabled, and an empty bpfLogLevel, which is why that field is
// always printed).
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
	s := &c.Spec
	if s.FloatingIPs == "" {
		s.FloatingIPs = "Disabled"
	}
	setDefault(&s.BPFConnectTimeLoadBalancing, "TCP")
	setDefault(&s.BPFHostNetworkedNATWithoutCTLB, "Enabled")
	if e := s.BPFConnectTimeLoadBalancingEnabled; e != nil {
		ctlb, nat := "Disabled", "Disabled"
		if *e {
			ctlb = "Enabled"
		}
		s.BPFConnectTimeLoadBalancing, s.BPFHostNetworkedNATWithoutCTLB = &ctlb, &nat
	}
	if s.NFTablesMode == "" {
		s.NFTablesMode = "Auto"
	}
	setDefault(&s.NFTablesFlowTableOffload, "Disabled")
}

// setDefault points an unset optional string at a default.
func setDefault(p **string, v string) {
	if *p == nil {
		*p = &v
	}
}

// defaultBGPConfig fills the defaults of Calico's schema: Info logging and
// LoadBalancer address aggregation on. CIDRs are stored as written.
func defaultBGPConfig(c *BGPConfiguration) {
	if c.Spec.LogSeverityScreen == "" {
		c.Spec.LogSeverityScreen = "Info"
	}
	setDefault(&c.Spec.ServiceLoadBalancerAggregation, "Enabled")
}

// Defaults of KubeControllersConfiguration that Calico's client writes.
const (
	DefaultKubeControllersMetricsPort = 9094
	DefaultLeakGracePeriod            = 15 * time.Minute
)

// defaultKubeControllersConfig fills what Calico fills: its client's
// Prometheus port and, for a node controller, IP leak grace period; its
// schema's health checks on, and, in the blocks present, LoadBalancer
// addresses for all services and the policy name migrator on. Like
// Calico, it leaves logSeverityScreen unset.
func defaultKubeControllersConfig(c *KubeControllersConfiguration) {
	s := &c.Spec
	if s.HealthChecks == "" {
		s.HealthChecks = "Enabled"
	}
	if s.PrometheusMetricsPort == nil {
		p := DefaultKubeControllersMetricsPort
		s.PrometheusMetricsPort = &p
	}
	if n := s.Controllers.Node; n != nil && n.LeakGracePeriod == nil {
		n.LeakGracePeriod = NewDuration(DefaultLeakGracePeriod)
	}
	if lb := s.Controllers.LoadBalancer; lb != nil && lb.AssignIPs == "" {
		lb.AssignIPs = "AllServices"
	}
	if m := s.Controllers.Migration; m != nil && m.PolicyNameMigrator == "" {
		m.PolicyNameMigrator = "Enabled"
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
