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
	case *GlobalNetworkPolicy:
		x.Spec.Tier = defaultTier(x.Spec.Tier)
		x.Spec.Types = defaultTypes(x.Spec.Types, x.Spec.Ingress, x.Spec.Egress)
	case *Tier:
		if x.Spec.DefaultAction == nil {
			deny := Deny
			x.Spec.DefaultAction = &deny
		}
	case *IPAMConfiguration:
		if x.Spec.AutoAllocateBlocks == nil {
			t := true
			x.Spec.AutoAllocateBlocks = &t
		}
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
