package v3

import (
	"reflect"
	"testing"
)

func TestDefault(t *testing.T) {
	enabled := "Enabled"
	tru, deny, auto, tierOrder := true, Deny, AssignmentAutomatic, DefaultTierOrder
	tests := []struct {
		name string
		in   Resource
		want Resource
	}{
		{
			name: "IPv4 pool",
			in:   &IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: IPPoolSpec{CIDR: "10.0.0.0/16"}},
			want: &IPPool{TypeMeta: TypeMeta{Kind: KindIPPool, APIVersion: APIVersion}, ObjectMeta: ObjectMeta{Name: "p"},
				Spec: IPPoolSpec{CIDR: "10.0.0.0/16", BlockSize: 26, IPIPMode: EncapNever, VXLANMode: EncapNever, NodeSelector: "all()",
					AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: &auto}},
		},
		{
			name: "IPv6 pool keeps what is set",
			in:   &IPPool{Spec: IPPoolSpec{CIDR: "fd00::/48", VXLANMode: EncapAlways, NodeSelector: "x == 'y'", AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseLoadBalancer}}},
			want: &IPPool{TypeMeta: TypeMeta{Kind: KindIPPool, APIVersion: APIVersion},
				Spec: IPPoolSpec{CIDR: "fd00::/48", BlockSize: 122, IPIPMode: EncapNever, VXLANMode: EncapAlways, NodeSelector: "x == 'y'",
					AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseLoadBalancer}, AssignmentMode: &auto}},
		},
		{
			name: "deprecated v1 pool fields",
			in:   &IPPool{Spec: IPPoolSpec{CIDR: "10.0.0.0/16", IPIP: &IPIPConfiguration{Enabled: true, Mode: EncapCrossSubnet}, NATOutgoingV1: true}},
			want: &IPPool{TypeMeta: TypeMeta{Kind: KindIPPool, APIVersion: APIVersion},
				Spec: IPPoolSpec{CIDR: "10.0.0.0/16", BlockSize: 26, IPIPMode: EncapCrossSubnet, VXLANMode: EncapNever, NATOutgoing: true,
					NodeSelector: "all()", AllowedUses: []IPPoolAllowedUse{IPPoolAllowedUseWorkload, IPPoolAllowedUseTunnel}, AssignmentMode: &auto}},
		},
		{
			name: "policy without rules is Ingress, namespace and tier filled",
			in:   &NetworkPolicy{ObjectMeta: ObjectMeta{Name: "np"}},
			want: &NetworkPolicy{TypeMeta: TypeMeta{Kind: KindNetworkPolicy, APIVersion: APIVersion}, ObjectMeta: ObjectMeta{Name: "np", Namespace: "default"},
				Spec: NetworkPolicySpec{Tier: "default", Types: []PolicyType{PolicyTypeIngress}}},
		},
		{
			name: "policy with only egress is Egress",
			in:   &GlobalNetworkPolicy{Spec: GlobalNetworkPolicySpec{Tier: "sec", Egress: []Rule{{Action: Allow}}}},
			want: &GlobalNetworkPolicy{TypeMeta: TypeMeta{Kind: KindGlobalNetworkPolicy, APIVersion: APIVersion},
				Spec: GlobalNetworkPolicySpec{Tier: "sec", Egress: []Rule{{Action: Allow}}, Types: []PolicyType{PolicyTypeEgress}}},
		},
		{
			name: "policy with both is Ingress and Egress",
			in:   &GlobalNetworkPolicy{Spec: GlobalNetworkPolicySpec{Ingress: []Rule{{Action: Deny}}, Egress: []Rule{{Action: Allow}}}},
			want: &GlobalNetworkPolicy{TypeMeta: TypeMeta{Kind: KindGlobalNetworkPolicy, APIVersion: APIVersion},
				Spec: GlobalNetworkPolicySpec{Tier: "default", Ingress: []Rule{{Action: Deny}}, Egress: []Rule{{Action: Allow}},
					Types: []PolicyType{PolicyTypeIngress, PolicyTypeEgress}}},
		},
		{
			name: "policy types given are kept",
			in:   &GlobalNetworkPolicy{Spec: GlobalNetworkPolicySpec{Types: []PolicyType{PolicyTypeEgress}}},
			want: &GlobalNetworkPolicy{TypeMeta: TypeMeta{Kind: KindGlobalNetworkPolicy, APIVersion: APIVersion},
				Spec: GlobalNetworkPolicySpec{Tier: "default", Types: []PolicyType{PolicyTypeEgress}}},
		},
		{
			name: "tier default action",
			in:   &Tier{ObjectMeta: ObjectMeta{Name: "t"}},
			want: &Tier{TypeMeta: TypeMeta{Kind: KindTier, APIVersion: APIVersion}, ObjectMeta: ObjectMeta{Name: "t"}, Spec: TierSpec{DefaultAction: &deny, Order: &tierOrder}},
		},
		{
			name: "IPAM auto allocation",
			in:   &IPAMConfiguration{ObjectMeta: ObjectMeta{Name: "default"}},
			want: &IPAMConfiguration{TypeMeta: TypeMeta{Kind: KindIPAMConfiguration, APIVersion: APIVersion}, ObjectMeta: ObjectMeta{Name: "default"},
				Spec: IPAMConfigurationSpec{AutoAllocateBlocks: &tru}},
		},
		{
			// The AS number and the mesh are left unset, as Calico does;
			// its schema fills the log level and LoadBalancer aggregation.
			name: "BGP configuration AS and mesh left unset, as Calico does",
			in:   &BGPConfiguration{ObjectMeta: ObjectMeta{Name: "default"}},
			want: &BGPConfiguration{TypeMeta: TypeMeta{Kind: KindBGPConfiguration, APIVersion: APIVersion}, ObjectMeta: ObjectMeta{Name: "default"},
				Spec: BGPConfigurationSpec{LogSeverityScreen: "Info", ServiceLoadBalancerAggregation: &enabled}},
		},
	}
	for _, tt := range tests {
		// Policies carry the label of their tier, as Calico stores them.
		switch w := tt.want.(type) {
		case *NetworkPolicy:
			setLabel(&w.ObjectMeta, LabelTier, w.Spec.Tier)
		case *GlobalNetworkPolicy:
			setLabel(&w.ObjectMeta, LabelTier, w.Spec.Tier)
		}
		t.Run(tt.name, func(t *testing.T) {
			Default(tt.in)
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", tt.in, tt.want)
			}
			Default(tt.in)
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Fatalf("Default is not idempotent: %+v", tt.in)
			}
		})
	}
}

func TestBGPConfigurationEffectiveValues(t *testing.T) {
	off := false
	as := DefaultASNumber + 1
	tests := []struct {
		name     string
		spec     *BGPConfigurationSpec
		wantMesh bool
		wantAS   uint32
	}{
		{"no configuration", nil, true, 64512},
		{"empty", &BGPConfigurationSpec{}, true, 64512},
		{"set", &BGPConfigurationSpec{NodeToNodeMeshEnabled: &off, ASNumber: &as}, false, 64513},
	}
	for _, tt := range tests {
		if got := tt.spec.NodeToNodeMesh(); got != tt.wantMesh {
			t.Errorf("%s: NodeToNodeMesh() = %t, want %t", tt.name, got, tt.wantMesh)
		}
		if got := uint32(tt.spec.AS()); got != tt.wantAS {
			t.Errorf("%s: AS() = %d, want %d", tt.name, got, tt.wantAS)
		}
	}
}
