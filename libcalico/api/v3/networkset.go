package v3

// Kind names of network sets.
const (
	KindNetworkSet           = "NetworkSet"
	KindNetworkSetList       = "NetworkSetList"
	KindGlobalNetworkSet     = "GlobalNetworkSet"
	KindGlobalNetworkSetList = "GlobalNetworkSetList"
)

// NetworkSet is a labelled set of networks that policy selectors in its
// namespace can match. Namespaced.
type NetworkSet struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NetworkSetSpec `json:"spec,omitempty"`
}

// NetworkSetSpec lists the networks of a network set.
type NetworkSetSpec struct {
	Nets []string `json:"nets,omitempty"`
}

// NetworkSetList is a list of network sets.
type NetworkSetList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []NetworkSet `json:"items"`
}

// Resources implements List.
func (l *NetworkSetList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *NetworkSetList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[NetworkSet](KindNetworkSetList, rs)
	return err
}

// GlobalNetworkSet is a labelled set of networks that any policy selector
// can match. Cluster-scoped.
type GlobalNetworkSet struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       GlobalNetworkSetSpec `json:"spec,omitempty"`
}

// GlobalNetworkSetSpec lists the networks of a global network set.
type GlobalNetworkSetSpec struct {
	Nets []string `json:"nets,omitempty"`
}

// GlobalNetworkSetList is a list of global network sets.
type GlobalNetworkSetList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []GlobalNetworkSet `json:"items"`
}

// Resources implements List.
func (l *GlobalNetworkSetList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *GlobalNetworkSetList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[GlobalNetworkSet](KindGlobalNetworkSetList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindNetworkSet, ListKind: KindNetworkSetList, Plural: "networksets",
		Namespaced: true, Stored: true,
		Aliases: []string{"networkset", "networksets", "netsets", "netset"},
		New: func() Resource {
			return &NetworkSet{TypeMeta: TypeMeta{Kind: KindNetworkSet, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &NetworkSetList{TypeMeta: TypeMeta{Kind: KindNetworkSetList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindGlobalNetworkSet, ListKind: KindGlobalNetworkSetList, Plural: "globalnetworksets",
		Stored:  true,
		Aliases: []string{"globalnetworkset", "globalnetworksets", "gns"},
		New: func() Resource {
			return &GlobalNetworkSet{TypeMeta: TypeMeta{Kind: KindGlobalNetworkSet, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &GlobalNetworkSetList{TypeMeta: TypeMeta{Kind: KindGlobalNetworkSetList, APIVersion: APIVersion}}
		},
	})
}
