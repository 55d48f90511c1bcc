package v3

// Kind names of the Kubernetes controllers configuration.
const (
	KindKubeControllersConfiguration     = "KubeControllersConfiguration"
	KindKubeControllersConfigurationList = "KubeControllersConfigurationList"
)

// KubeControllersConfiguration configures the Kubernetes controllers; there
// is one, named "default". Cluster-scoped.
type KubeControllersConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       KubeControllersConfigurationSpec   `json:"spec,omitempty"`
	Status     KubeControllersConfigurationStatus `json:"status"`
}

// KubeControllersConfigurationSpec is the controllers' settings.
type KubeControllersConfigurationSpec struct {
	LogSeverityScreen string `json:"logSeverityScreen,omitempty"`
	// HealthChecks is Enabled or Disabled.
	HealthChecks           string    `json:"healthChecks,omitempty"`
	EtcdV3CompactionPeriod *Duration `json:"etcdV3CompactionPeriod,omitempty"`
	PrometheusMetricsPort  *int      `json:"prometheusMetricsPort,omitempty"`
	DebugProfilePort       *int32    `json:"debugProfilePort,omitempty"`
	// Controllers enables controllers: a controller runs when its block is
	// present.
	Controllers ControllersConfig `json:"controllers"`
}

// ControllersConfig enables and configures each controller.
type ControllersConfig struct {
	Node             *NodeControllerConfig             `json:"node,omitempty"`
	Policy           *PolicyControllerConfig           `json:"policy,omitempty"`
	WorkloadEndpoint *WorkloadEndpointControllerConfig `json:"workloadEndpoint,omitempty"`
	ServiceAccount   *ServiceAccountControllerConfig   `json:"serviceAccount,omitempty"`
	Namespace        *NamespaceControllerConfig        `json:"namespace,omitempty"`
	LoadBalancer     *LoadBalancerControllerConfig     `json:"loadBalancer,omitempty"`
	Migration        *MigrationControllerConfig        `json:"policyMigration,omitempty"`
}

// MigrationControllerConfig switches Calico's policy name migrator, which
// renames policies stored under old-style names.
type MigrationControllerConfig struct {
	// PolicyNameMigrator is Enabled or Disabled.
	PolicyNameMigrator string `json:"enabled,omitempty"`
}

// NodeControllerConfig configures the node controller.
type NodeControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
	// SyncLabels is Enabled or Disabled.
	SyncLabels      string                  `json:"syncLabels,omitempty"`
	HostEndpoint    *AutoHostEndpointConfig `json:"hostEndpoint,omitempty"`
	LeakGracePeriod *Duration               `json:"leakGracePeriod,omitempty"`
}

// AutoHostEndpointConfig configures automatic host endpoints.
type AutoHostEndpointConfig struct {
	// AutoCreate and CreateDefaultHostEndpoint are Enabled or Disabled.
	AutoCreate                string                 `json:"autoCreate,omitempty"`
	CreateDefaultHostEndpoint string                 `json:"createDefaultHostEndpoint,omitempty"`
	Templates                 []HostEndpointTemplate `json:"templates,omitempty"`
}

// HostEndpointTemplate generates host endpoints for matching nodes.
type HostEndpointTemplate struct {
	GenerateName     string            `json:"generateName,omitempty"`
	InterfaceCIDRs   []string          `json:"interfaceCIDRs,omitempty"`
	InterfacePattern string            `json:"interfacePattern,omitempty"`
	NodeSelector     string            `json:"nodeSelector,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
}

// PolicyControllerConfig configures the policy controller.
type PolicyControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// WorkloadEndpointControllerConfig configures the workload endpoint
// controller.
type WorkloadEndpointControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// ServiceAccountControllerConfig configures the service account controller.
type ServiceAccountControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// NamespaceControllerConfig configures the namespace controller.
type NamespaceControllerConfig struct {
	ReconcilerPeriod *Duration `json:"reconcilerPeriod,omitempty"`
}

// LoadBalancerControllerConfig configures the LoadBalancer IPAM controller.
type LoadBalancerControllerConfig struct {
	// AssignIPs is AllServices or RequestedServicesOnly.
	AssignIPs string `json:"assignIPs,omitempty"`
}

// KubeControllersConfigurationStatus is what the controllers report.
type KubeControllersConfigurationStatus struct {
	RunningConfig   *KubeControllersConfigurationSpec `json:"runningConfig,omitempty"`
	EnvironmentVars map[string]string                 `json:"environmentVars,omitempty"`
}

// KubeControllersConfigurationList is a list of controller configurations.
type KubeControllersConfigurationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []KubeControllersConfiguration `json:"items"`
}

// Resources implements List.
func (l *KubeControllersConfigurationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *KubeControllersConfigurationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[KubeControllersConfiguration](KindKubeControllersConfigurationList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindKubeControllersConfiguration, ListKind: KindKubeControllersConfigurationList,
		Plural: "kubecontrollersconfigurations", Stored: true,
		Aliases: []string{"kubecontrollersconfiguration", "kubecontrollersconfigurations",
			"kubecontrollersconfig", "kubecontrollersconfigs"},
		New: func() Resource {
			return &KubeControllersConfiguration{TypeMeta: TypeMeta{Kind: KindKubeControllersConfiguration, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &KubeControllersConfigurationList{TypeMeta: TypeMeta{Kind: KindKubeControllersConfigurationList, APIVersion: APIVersion}}
		},
	})
}
