package v3

// Kind names of the calicoctl configuration.
const (
	KindCalicoAPIConfig     = "CalicoAPIConfig"
	KindCalicoAPIConfigList = "CalicoAPIConfigList"
)

// Datastore types a CalicoAPIConfig may name.
const (
	DatastoreEtcdV3     = "etcdv3"
	DatastoreKubernetes = "kubernetes"
)

// CalicoAPIConfig is calicoctl's configuration file
// (/etc/calico/calicoctl.cfg): how to reach the datastore. It is never
// stored in the datastore.
type CalicoAPIConfig struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       CalicoAPIConfigSpec `json:"spec,omitempty"`
}

// CalicoAPIConfigSpec holds the datastore connection settings.
type CalicoAPIConfigSpec struct {
	// DatastoreType is etcdv3 or kubernetes.
	DatastoreType string `json:"datastoreType,omitempty"`
	// EtcdEndpoints is a comma-separated list of etcd URLs.
	EtcdEndpoints    string `json:"etcdEndpoints,omitempty"`
	EtcdDiscoverySrv string `json:"etcdDiscoverySrv,omitempty"`
	EtcdUsername     string `json:"etcdUsername,omitempty"`
	EtcdPassword     string `json:"etcdPassword,omitempty"`
	EtcdKeyFile      string `json:"etcdKeyFile,omitempty"`
	EtcdCertFile     string `json:"etcdCertFile,omitempty"`
	EtcdCACertFile   string `json:"etcdCACertFile,omitempty"`
	// EtcdKey, EtcdCert and EtcdCACert hold PEM data inline.
	EtcdKey    string `json:"etcdKey,omitempty"`
	EtcdCert   string `json:"etcdCert,omitempty"`
	EtcdCACert string `json:"etcdCACert,omitempty"`

	Kubeconfig               string  `json:"kubeconfig,omitempty"`
	KubeconfigInline         string  `json:"kubeconfigInline,omitempty"`
	K8sAPIEndpoint           string  `json:"k8sAPIEndpoint,omitempty"`
	K8sKeyFile               string  `json:"k8sKeyFile,omitempty"`
	K8sCertFile              string  `json:"k8sCertFile,omitempty"`
	K8sCAFile                string  `json:"k8sCAFile,omitempty"`
	K8sAPIToken              string  `json:"k8sAPIToken,omitempty"`
	K8sInsecureSkipTLSVerify bool    `json:"k8sInsecureSkipTLSVerify,omitempty"`
	K8sDisableNodePoll       bool    `json:"k8sDisableNodePoll,omitempty"`
	K8sClientQPS             float32 `json:"k8sClientQPS,omitempty"`
}

// CalicoAPIConfigList is a list of calicoctl configurations (exists only so
// that every kind has a list).
type CalicoAPIConfigList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []CalicoAPIConfig `json:"items"`
}

// Resources implements List.
func (l *CalicoAPIConfigList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *CalicoAPIConfigList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[CalicoAPIConfig](KindCalicoAPIConfigList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindCalicoAPIConfig, ListKind: KindCalicoAPIConfigList, Plural: "calicoapiconfigs", Stored: false,
		Aliases: []string{"calicoapiconfig", "calicoapiconfigs"},
		New: func() Resource {
			return &CalicoAPIConfig{TypeMeta: TypeMeta{Kind: KindCalicoAPIConfig, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &CalicoAPIConfigList{TypeMeta: TypeMeta{Kind: KindCalicoAPIConfigList, APIVersion: APIVersion}}
		},
	})
}
