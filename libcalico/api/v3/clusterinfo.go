package v3

// Kind names of cluster information.
const (
	KindClusterInformation     = "ClusterInformation"
	KindClusterInformationList = "ClusterInformationList"
)

// ClusterInformation describes the cluster; there is one, named "default",
// written by calico-node. Cluster-scoped.
type ClusterInformation struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       ClusterInformationSpec `json:"spec,omitempty"`
}

// ClusterInformationSpec is the cluster's identity.
type ClusterInformationSpec struct {
	ClusterGUID   string `json:"clusterGUID,omitempty"`
	ClusterType   string `json:"clusterType,omitempty"`
	CalicoVersion string `json:"calicoVersion,omitempty"`
	// DatastoreReady false tells every component to pause.
	DatastoreReady *bool  `json:"datastoreReady,omitempty"`
	Variant        string `json:"variant,omitempty"`
}

// ClusterInformationList is a list of cluster informations.
type ClusterInformationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []ClusterInformation `json:"items"`
}

// Resources implements List.
func (l *ClusterInformationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *ClusterInformationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[ClusterInformation](KindClusterInformationList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindClusterInformation, ListKind: KindClusterInformationList, Plural: "clusterinformations", Stored: true,
		Aliases: []string{"clusterinformation", "clusterinformations", "clusterinfo", "clusterinfos"},
		New: func() Resource {
			return &ClusterInformation{TypeMeta: TypeMeta{Kind: KindClusterInformation, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &ClusterInformationList{TypeMeta: TypeMeta{Kind: KindClusterInformationList, APIVersion: APIVersion}}
		},
	})
}
