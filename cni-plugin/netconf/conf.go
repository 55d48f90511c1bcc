package netconf

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/palisade-net/palisade/libcalico/endpointstatus"
)

// Defaults applied by Load.
const (
	DefaultMTU              = 1500
	DefaultNodenameFile     = "/var/lib/calico/nodename"
	DefaultDatastoreTimeout = 10 * time.Second
	// NodenameFileEnv overrides the default nodename file path (for tests
	// and unusual installs); nodename_file in the configuration wins.
	NodenameFileEnv = "CALICO_NODENAME_FILE"
)

// NetConf is the network configuration of the calico and calico-ipam
// plugins, with Calico's key names.
type NetConf struct {
	types.PluginConf

	LogLevel    string `json:"log_level,omitempty"`
	LogFilePath string `json:"log_file_path,omitempty"`

	DatastoreType  string `json:"datastore_type,omitempty"`
	EtcdEndpoints  string `json:"etcd_endpoints,omitempty"`
	EtcdKeyFile    string `json:"etcd_key_file,omitempty"`
	EtcdCertFile   string `json:"etcd_cert_file,omitempty"`
	EtcdCACertFile string `json:"etcd_ca_cert_file,omitempty"`
	// DatastoreTimeout bounds each datastore call ("10s" by default); a
	// Palisade addition, so a dead etcd fails a pod quickly.
	DatastoreTimeout string `json:"datastore_timeout,omitempty"`

	Nodename             string `json:"nodename,omitempty"`
	NodenameFile         string `json:"nodename_file,omitempty"`
	NodenameFileOptional bool   `json:"nodename_file_optional,omitempty"`

	MTU int `json:"mtu,omitempty"`

	// PolicySetupTimeoutSeconds makes ADD wait, at most this long, for
	// felix to report the new endpoint's policy programmed (files under
	// EndpointStatusDir); 0, the default, does not wait. Calico's keys.
	PolicySetupTimeoutSeconds int    `json:"policy_setup_timeout_seconds,omitempty"`
	EndpointStatusDir         string `json:"endpoint_status_dir,omitempty"`
	IPAM                      IPAM   `json:"ipam"`

	ContainerSettings ContainerSettings `json:"container_settings,omitempty"`
	Policy            Policy            `json:"policy,omitempty"`
	Kubernetes        Kubernetes        `json:"kubernetes,omitempty"`
	FeatureControl    FeatureControl    `json:"feature_control,omitempty"`
	RuntimeConfig     map[string]any    `json:"runtimeConfig,omitempty"`

	// timeout is DatastoreTimeout parsed.
	timeout time.Duration
}

// IPAM is the ipam section: its type and calico-ipam's own keys.
type IPAM struct {
	Type       string   `json:"type"`
	AssignIPv4 *string  `json:"assign_ipv4,omitempty"`
	AssignIPv6 *string  `json:"assign_ipv6,omitempty"`
	IPv4Pools  []string `json:"ipv4_pools,omitempty"`
	IPv6Pools  []string `json:"ipv6_pools,omitempty"`
}

// ContainerSettings tunes the workload's own namespace.
type ContainerSettings struct {
	AllowIPForwarding bool `json:"allow_ip_forwarding,omitempty"`
}

// Policy selects who writes policy for the workload; empty means the
// plugin creates a profile named after the network, "k8s" that the
// pod's labels, namespace and service account decide (read from the API
// server). The k8s_* keys are Calico's older way to reach the API server;
// they override the kubeconfig's.
type Policy struct {
	Type                    string `json:"type,omitempty"`
	K8sAPIRoot              string `json:"k8s_api_root,omitempty"`
	K8sAuthToken            string `json:"k8s_auth_token,omitempty"`
	K8sClientCertificate    string `json:"k8s_client_certificate,omitempty"`
	K8sClientKey            string `json:"k8s_client_key,omitempty"`
	K8sCertificateAuthority string `json:"k8s_certificate_authority,omitempty"`
}

// Kubernetes is the kubernetes section: how to reach the API server (a
// kubeconfig, or an API root), which turns on the Kubernetes mode for
// pods.
type Kubernetes struct {
	Kubeconfig string `json:"kubeconfig,omitempty"`
	K8sAPIRoot string `json:"k8s_api_root,omitempty"`
	// NodeName is the Kubernetes node (for usePodCidr); the plugin's node
	// name when empty.
	NodeName string `json:"node_name,omitempty"`
}

// FeatureControl turns on features Calico keeps off by default.
type FeatureControl struct {
	// IPAddrsNoIpam lets a pod's cni.projectcalico.org/ipAddrsNoIpam
	// annotation give it addresses without IPAM.
	IPAddrsNoIpam bool `json:"ip_addrs_no_ipam,omitempty"`
	// FloatingIPs lets a pod's cni.projectcalico.org/floatingIPs
	// annotation give its WorkloadEndpoint ipNATs (felix acts on them
	// when FelixConfiguration floatingIPs is Enabled).
	FloatingIPs bool `json:"floating_ips,omitempty"`
}

// Load parses and checks a network configuration. Errors are CNI errors
// with the code the specification gives for them.
func Load(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network configuration: %v", err), "")
	}
	bad := func(format string, a ...any) error {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("network %q: ", conf.Name)+fmt.Sprintf(format, a...), "")
	}
	if conf.Name == "" {
		return nil, bad("name is required")
	}
	if conf.Type == "" {
		return nil, bad("type is required (the plugin to run, \"calico\")")
	}
	if conf.IPAM.Type == "" {
		return nil, bad("ipam.type is required (the IPAM plugin, \"calico-ipam\" or another such as \"host-local\")")
	}
	switch conf.DatastoreType {
	case "", "etcdv3":
	default:
		return nil, bad("datastore_type %q is not supported: Palisade stores its state in etcd (\"etcdv3\")", conf.DatastoreType)
	}
	if conf.MTU == 0 {
		mtu, err := conf.fileMTU()
		if err != nil {
			return nil, bad("%v", err)
		}
		conf.MTU = mtu
	}
	if conf.MTU < 0 {
		return nil, bad("mtu %d must be positive", conf.MTU)
	}
	if conf.PolicySetupTimeoutSeconds < 0 {
		return nil, bad("policy_setup_timeout_seconds %d must not be negative", conf.PolicySetupTimeoutSeconds)
	}
	if conf.EndpointStatusDir == "" {
		conf.EndpointStatusDir = endpointstatus.DefaultDir
	}
	conf.timeout = DefaultDatastoreTimeout
	if conf.DatastoreTimeout != "" {
		d, err := time.ParseDuration(conf.DatastoreTimeout)
		if err != nil || d <= 0 {
			return nil, bad("datastore_timeout %q is not a positive duration", conf.DatastoreTimeout)
		}
		conf.timeout = d
	}
	if _, err := conf.AssignFamilies(); err != nil {
		return nil, bad("%v", err)
	}
	return conf, nil
}

// Timeout bounds one datastore call.
func (c *NetConf) Timeout() time.Duration {
	if c.timeout == 0 {
		return DefaultDatastoreTimeout
	}
	return c.timeout
}

// Families says which address families calico-ipam assigns: IPv4 unless
// assign_ipv4 is "false", IPv6 when assign_ipv6 is "true".
type Families struct{ IPv4, IPv6 bool }

// AssignFamilies reads ipam.assign_ipv4 and ipam.assign_ipv6.
func (c *NetConf) AssignFamilies() (Families, error) {
	f := Families{IPv4: true}
	parse := func(key string, v *string, into *bool) error {
		if v == nil {
			return nil
		}
		switch strings.ToLower(*v) {
		case "true":
			*into = true
		case "false":
			*into = false
		default:
			return fmt.Errorf("ipam.%s %q must be \"true\" or \"false\"", key, *v)
		}
		return nil
	}
	if err := parse("assign_ipv4", c.IPAM.AssignIPv4, &f.IPv4); err != nil {
		return f, err
	}
	if err := parse("assign_ipv6", c.IPAM.AssignIPv6, &f.IPv6); err != nil {
		return f, err
	}
	if !f.IPv4 && !f.IPv6 {
		return f, fmt.Errorf("ipam assigns no address: assign_ipv4 and assign_ipv6 are both false")
	}
	return f, nil
}
