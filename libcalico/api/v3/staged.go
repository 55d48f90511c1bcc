package v3

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Kind names of staged policies: policies stored and listed but never
// enforced, so their effect can be previewed before they are made real.
const (
	KindStagedNetworkPolicy               = "StagedNetworkPolicy"
	KindStagedNetworkPolicyList           = "StagedNetworkPolicyList"
	KindStagedGlobalNetworkPolicy         = "StagedGlobalNetworkPolicy"
	KindStagedGlobalNetworkPolicyList     = "StagedGlobalNetworkPolicyList"
	KindStagedKubernetesNetworkPolicy     = "StagedKubernetesNetworkPolicy"
	KindStagedKubernetesNetworkPolicyList = "StagedKubernetesNetworkPolicyList"
)

// StagedAction is what making a staged policy real would do.
type StagedAction string

// Staged actions.
const (
	StagedActionSet    StagedAction = "Set"
	StagedActionDelete StagedAction = "Delete"
)

// StagedNetworkPolicy is a NetworkPolicy that is stored but not enforced.
// Namespaced.
type StagedNetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       StagedNetworkPolicySpec `json:"spec,omitempty"`
}

// StagedNetworkPolicySpec is a NetworkPolicySpec and the staged action.
type StagedNetworkPolicySpec struct {
	StagedAction           StagedAction            `json:"stagedAction,omitempty"`
	Tier                   string                  `json:"tier,omitempty"`
	Order                  *float64                `json:"order,omitempty"`
	Ingress                []Rule                  `json:"ingress,omitempty"`
	Egress                 []Rule                  `json:"egress,omitempty"`
	Selector               string                  `json:"selector,omitempty"`
	Types                  []PolicyType            `json:"types,omitempty"`
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// StagedGlobalNetworkPolicy is a GlobalNetworkPolicy that is stored but
// not enforced. Cluster-scoped.
type StagedGlobalNetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       StagedGlobalNetworkPolicySpec `json:"spec,omitempty"`
}

// StagedGlobalNetworkPolicySpec is a GlobalNetworkPolicySpec and the
// staged action.
type StagedGlobalNetworkPolicySpec struct {
	StagedAction           StagedAction            `json:"stagedAction,omitempty"`
	Tier                   string                  `json:"tier,omitempty"`
	Order                  *float64                `json:"order,omitempty"`
	Ingress                []Rule                  `json:"ingress,omitempty"`
	Egress                 []Rule                  `json:"egress,omitempty"`
	Selector               string                  `json:"selector,omitempty"`
	Types                  []PolicyType            `json:"types,omitempty"`
	DoNotTrack             bool                    `json:"doNotTrack,omitempty"`
	PreDNAT                bool                    `json:"preDNAT,omitempty"`
	ApplyOnForward         bool                    `json:"applyOnForward,omitempty"`
	ServiceAccountSelector string                  `json:"serviceAccountSelector,omitempty"`
	NamespaceSelector      string                  `json:"namespaceSelector,omitempty"`
	PerformanceHints       []PolicyPerformanceHint `json:"performanceHints,omitempty"`
}

// StagedKubernetesNetworkPolicy is a Kubernetes NetworkPolicy that is
// stored but not enforced. Namespaced.
type StagedKubernetesNetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       StagedKubernetesNetworkPolicySpec `json:"spec,omitempty"`
}

// StagedKubernetesNetworkPolicySpec is the spec of a Kubernetes
// networking.k8s.io/v1 NetworkPolicy and the staged action.
type StagedKubernetesNetworkPolicySpec struct {
	StagedAction StagedAction             `json:"stagedAction,omitempty"`
	PodSelector  K8sLabelSelector         `json:"podSelector"`
	Ingress      []K8sNetworkPolicyRule   `json:"ingress,omitempty"`
	Egress       []K8sNetworkPolicyEgress `json:"egress,omitempty"`
	PolicyTypes  []PolicyType             `json:"policyTypes,omitempty"`
}

// K8sLabelSelector is a Kubernetes label selector.
type K8sLabelSelector struct {
	MatchLabels      map[string]string     `json:"matchLabels,omitempty"`
	MatchExpressions []K8sLabelRequirement `json:"matchExpressions,omitempty"`
}

// K8sLabelRequirement is one expression of a Kubernetes label selector.
type K8sLabelRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// K8sNetworkPolicyRule is a Kubernetes NetworkPolicy ingress rule.
type K8sNetworkPolicyRule struct {
	Ports []K8sNetworkPolicyPort `json:"ports,omitempty"`
	From  []K8sNetworkPolicyPeer `json:"from,omitempty"`
}

// K8sNetworkPolicyEgress is a Kubernetes NetworkPolicy egress rule.
type K8sNetworkPolicyEgress struct {
	Ports []K8sNetworkPolicyPort `json:"ports,omitempty"`
	To    []K8sNetworkPolicyPeer `json:"to,omitempty"`
}

// K8sNetworkPolicyPort is a port (number or name) and protocol.
type K8sNetworkPolicyPort struct {
	Protocol *string      `json:"protocol,omitempty"`
	Port     *IntOrString `json:"port,omitempty"`
	EndPort  *int32       `json:"endPort,omitempty"`
}

// K8sNetworkPolicyPeer is a peer of a Kubernetes NetworkPolicy rule.
type K8sNetworkPolicyPeer struct {
	PodSelector       *K8sLabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *K8sLabelSelector `json:"namespaceSelector,omitempty"`
	IPBlock           *K8sIPBlock       `json:"ipBlock,omitempty"`
}

// K8sIPBlock is a CIDR with exceptions.
type K8sIPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// StagedNetworkPolicyList is a list of staged namespaced policies.
type StagedNetworkPolicyList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []StagedNetworkPolicy `json:"items"`
}

// Resources implements List.
func (l *StagedNetworkPolicyList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *StagedNetworkPolicyList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[StagedNetworkPolicy](KindStagedNetworkPolicyList, rs)
	return err
}

// StagedGlobalNetworkPolicyList is a list of staged global policies.
type StagedGlobalNetworkPolicyList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []StagedGlobalNetworkPolicy `json:"items"`
}

// Resources implements List.
func (l *StagedGlobalNetworkPolicyList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *StagedGlobalNetworkPolicyList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[StagedGlobalNetworkPolicy](KindStagedGlobalNetworkPolicyList, rs)
	return err
}

// StagedKubernetesNetworkPolicyList is a list of staged Kubernetes
// policies.
type StagedKubernetesNetworkPolicyList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []StagedKubernetesNetworkPolicy `json:"items"`
}

// Resources implements List.
func (l *StagedKubernetesNetworkPolicyList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *StagedKubernetesNetworkPolicyList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[StagedKubernetesNetworkPolicy](KindStagedKubernetesNetworkPolicyList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindStagedNetworkPolicy, ListKind: KindStagedNetworkPolicyList, Plural: "stagednetworkpolicies",
		Namespaced: true, Stored: true,
		Aliases: []string{"stagednetworkpolicy", "stagednetworkpolicies", "snp", "snps", "stagedpolicy", "stagedpolicies"},
		New: func() Resource {
			return &StagedNetworkPolicy{TypeMeta: TypeMeta{Kind: KindStagedNetworkPolicy, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &StagedNetworkPolicyList{TypeMeta: TypeMeta{Kind: KindStagedNetworkPolicyList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindStagedGlobalNetworkPolicy, ListKind: KindStagedGlobalNetworkPolicyList, Plural: "stagedglobalnetworkpolicies",
		Stored:  true,
		Aliases: []string{"stagedglobalnetworkpolicy", "stagedglobalnetworkpolicies", "sgnp", "sgnps", "stagedglobalpolicy", "stagedglobalpolicies"},
		New: func() Resource {
			return &StagedGlobalNetworkPolicy{TypeMeta: TypeMeta{Kind: KindStagedGlobalNetworkPolicy, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &StagedGlobalNetworkPolicyList{TypeMeta: TypeMeta{Kind: KindStagedGlobalNetworkPolicyList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindStagedKubernetesNetworkPolicy, ListKind: KindStagedKubernetesNetworkPolicyList, Plural: "stagedkubernetesnetworkpolicies",
		Namespaced: true, Stored: true,
		Aliases: []string{"stagedkubernetesnetworkpolicy", "stagedkubernetesnetworkpolicies", "sknp", "sknps"},
		New: func() Resource {
			return &StagedKubernetesNetworkPolicy{TypeMeta: TypeMeta{Kind: KindStagedKubernetesNetworkPolicy, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &StagedKubernetesNetworkPolicyList{TypeMeta: TypeMeta{Kind: KindStagedKubernetesNetworkPolicyList, APIVersion: APIVersion}}
		},
	})
}

// IntOrString is a Kubernetes int-or-string value (a port number or name).
type IntOrString struct {
	IntVal int32
	StrVal string
	IsStr  bool
}

// UnmarshalJSON reads a number or a string.
func (v *IntOrString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		v.IsStr = true
		return json.Unmarshal(b, &v.StrVal)
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("%s: want an integer or a string", b)
	}
	v.IntVal, v.IsStr = int32(n), false
	return nil
}

// MarshalJSON writes the number or the string.
func (v IntOrString) MarshalJSON() ([]byte, error) {
	if v.IsStr {
		return json.Marshal(v.StrVal)
	}
	return json.Marshal(v.IntVal)
}
