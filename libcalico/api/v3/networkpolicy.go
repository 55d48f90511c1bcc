package v3

// Kind names of policies.
const (
	KindNetworkPolicy           = "NetworkPolicy"
	KindNetworkPolicyList       = "NetworkPolicyList"
	KindGlobalNetworkPolicy     = "GlobalNetworkPolicy"
	KindGlobalNetworkPolicyList = "GlobalNetworkPolicyList"
)

// DefaultTierName is the tier policies belong to when none is given.
const DefaultTierName = "default"

// NetworkPolicy is an ordered set of rules applied to the endpoints of one
// namespace that its selector matches. Namespaced.
type NetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NetworkPolicySpec `json:"spec,omitempty"`
}

// NetworkPolicySpec is the content of a namespaced policy.
type NetworkPolicySpec struct {
	// Tier is the tier the policy belongs to; "default" when empty.
	Tier string `json:"tier,omitempty"`
	// Order decides the policy's place in its tier: lower first; policies
	// without an order come last.
	Order   *float64 `json:"order,omitempty"`
	Ingress []Rule   `json:"ingress,omitempty"`
	Egress  []Rule   `json:"egress,omitempty"`
	// Selector chooses the endpoints the policy applies to.
	Selector string `json:"selector,omitempty"`
	// Types lists the directions the policy applies to; inferred from the
	// rules present when empty.
	Types []PolicyType `json:"types,omitempty"`
	// ServiceAccountSelector further restricts the endpoints by the labels
	// of their service account.
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// NetworkPolicyList is a list of namespaced policies.
type NetworkPolicyList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []NetworkPolicy `json:"items"`
}

// Resources implements List.
func (l *NetworkPolicyList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *NetworkPolicyList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[NetworkPolicy](KindNetworkPolicyList, rs)
	return err
}

// GlobalNetworkPolicy is a policy applied to endpoints of every namespace and
// to host endpoints. Cluster-scoped.
type GlobalNetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       GlobalNetworkPolicySpec `json:"spec,omitempty"`
}

// GlobalNetworkPolicySpec is the content of a global policy.
type GlobalNetworkPolicySpec struct {
	Tier     string       `json:"tier,omitempty"`
	Order    *float64     `json:"order,omitempty"`
	Ingress  []Rule       `json:"ingress,omitempty"`
	Egress   []Rule       `json:"egress,omitempty"`
	Selector string       `json:"selector,omitempty"`
	Types    []PolicyType `json:"types,omitempty"`
	// DoNotTrack applies the policy before connection tracking; such rules
	// must be written for both directions.
	DoNotTrack bool `json:"doNotTrack,omitempty"`
	// PreDNAT applies the policy before destination NAT (host endpoints,
	// ingress only).
	PreDNAT bool `json:"preDNAT,omitempty"`
	// ApplyOnForward applies the policy to traffic forwarded through host
	// endpoints as well as to traffic to and from the host.
	ApplyOnForward         bool                    `json:"applyOnForward,omitempty"`
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	NamespaceSelector      string                  `json:"namespaceSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// GlobalNetworkPolicyList is a list of global policies.
type GlobalNetworkPolicyList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []GlobalNetworkPolicy `json:"items"`
}

// Resources implements List.
func (l *GlobalNetworkPolicyList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *GlobalNetworkPolicyList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[GlobalNetworkPolicy](KindGlobalNetworkPolicyList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindNetworkPolicy, ListKind: KindNetworkPolicyList, Plural: "networkpolicies",
		Namespaced: true, Stored: true,
		Aliases: []string{"networkpolicy", "networkpolicies", "policy", "np", "policies", "pol", "pols"},
		New: func() Resource {
			return &NetworkPolicy{TypeMeta: TypeMeta{Kind: KindNetworkPolicy, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &NetworkPolicyList{TypeMeta: TypeMeta{Kind: KindNetworkPolicyList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindGlobalNetworkPolicy, ListKind: KindGlobalNetworkPolicyList, Plural: "globalnetworkpolicies",
		Stored:  true,
		Aliases: []string{"globalnetworkpolicy", "globalnetworkpolicies", "gnp", "gnps", "globalpolicy", "globalpolicies"},
		New: func() Resource {
			return &GlobalNetworkPolicy{TypeMeta: TypeMeta{Kind: KindGlobalNetworkPolicy, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &GlobalNetworkPolicyList{TypeMeta: TypeMeta{Kind: KindGlobalNetworkPolicyList, APIVersion: APIVersion}}
		},
	})
}
