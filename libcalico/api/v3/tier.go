package v3

// Kind names of tiers.
const (
	KindTier     = "Tier"
	KindTierList = "TierList"
)

// Tier groups policies; tiers are evaluated in order, and a policy's Pass
// action jumps to the next tier. Cluster-scoped.
type Tier struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       TierSpec   `json:"spec,omitempty"`
	Status     TierStatus `json:"status"`
}

// TierStatus is what Calico's tier controller reports; Palisade keeps what
// an export carries and writes none of its own.
type TierStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is a Kubernetes status condition.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime *Time  `json:"lastTransitionTime,omitempty"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
}

// TierSpec is the content of a tier.
type TierSpec struct {
	// Order decides the tier's place: lower first; unset comes last.
	Order *float64 `json:"order,omitempty"`
	// DefaultAction is applied when policies of the tier select an
	// endpoint but no rule matches: Deny (default) or Pass.
	DefaultAction *Action `json:"defaultAction,omitempty"`
}

// TierList is a list of tiers.
type TierList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []Tier `json:"items"`
}

// Resources implements List.
func (l *TierList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *TierList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[Tier](KindTierList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindTier, ListKind: KindTierList, Plural: "tiers", Stored: true,
		Aliases: []string{"tier", "tiers"},
		New:     func() Resource { return &Tier{TypeMeta: TypeMeta{Kind: KindTier, APIVersion: APIVersion}} },
		NewList: func() List { return &TierList{TypeMeta: TypeMeta{Kind: KindTierList, APIVersion: APIVersion}} },
	})
}
