// Package apiconfig reads the datastore settings the way calicoctl and
// calico-node share them: a CalicoAPIConfig file, overridden by the
// environment (DATASTORE_TYPE, ETCD_ENDPOINTS, ETCD_USERNAME,
// ETCD_PASSWORD, ETCD_KEY_FILE, ETCD_CERT_FILE, ETCD_CA_CERT_FILE and the
// inline ETCD_KEY, ETCD_CERT, ETCD_CA_CERT, each also read with a CALICO_
// prefix).
package apiconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// DefaultPath is where the CalicoAPIConfig is read from unless told
// otherwise; a missing file there is no error.
const DefaultPath = "/etc/calico/calicoctl.cfg"

// envOverrides maps environment variables to the field they set. The bare
// name wins over the CALICO_ prefixed one.
var envOverrides = []struct {
	name string
	set  func(*v3.CalicoAPIConfigSpec, string)
}{
	{"DATASTORE_TYPE", func(s *v3.CalicoAPIConfigSpec, v string) { s.DatastoreType = v }},
	{"ETCD_ENDPOINTS", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdEndpoints = v }},
	{"ETCD_USERNAME", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdUsername = v }},
	{"ETCD_PASSWORD", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdPassword = v }},
	{"ETCD_KEY_FILE", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdKeyFile = v }},
	{"ETCD_CERT_FILE", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdCertFile = v }},
	{"ETCD_CA_CERT_FILE", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdCACertFile = v }},
	{"ETCD_KEY", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdKey = v }},
	{"ETCD_CERT", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdCert = v }},
	{"ETCD_CA_CERT", func(s *v3.CalicoAPIConfigSpec, v string) { s.EtcdCACert = v }},
}

// Load reads the CalicoAPIConfig at path (absent at DefaultPath is fine),
// lets the environment override it, and returns the etcd settings it
// describes. Endpoints stay empty when nothing names one: the caller
// decides the default. DialTimeout is left for the caller too.
func Load(path string, getenv func(string) string) (etcdv3.Config, error) {
	spec, err := loadSpec(path, getenv)
	if err != nil {
		return etcdv3.Config{}, err
	}
	return etcdConfig(spec)
}

// Kubeconfig is the kubeconfig file the CalicoAPIConfig at path names
// (spec.kubeconfig, overridden by KUBECONFIG or CALICO_KUBECONFIG), or ""
// when none is named. Palisade's datastore is etcd; the Kubernetes API is
// read only where a command needs Kubernetes objects (ipam check reads
// the Services holding LoadBalancer addresses).
func Kubeconfig(path string, getenv func(string) string) (string, error) {
	spec, err := loadSpec(path, getenv)
	if err != nil {
		return "", err
	}
	if set := unreadK8sFields(spec); len(set) > 0 {
		return "", fmt.Errorf("config file %s: %s not supported: Palisade reaches the Kubernetes API only through a kubeconfig file; set spec.kubeconfig or KUBECONFIG instead", path, strings.Join(set, ", "))
	}
	for _, name := range []string{"KUBECONFIG", "CALICO_KUBECONFIG"} {
		if v := getenv(name); v != "" {
			return v, nil
		}
	}
	return spec.Kubeconfig, nil
}

// unreadK8sFields names the Kubernetes connection fields of spec other
// than kubeconfig that are set. Palisade's datastore is etcd, so, as in
// Calico with datastoreType etcdv3, they mean nothing to Load; where the
// Kubernetes API is read (Kubeconfig), they are refused rather than
// ignored, so a command never talks to another cluster than the one
// they describe.
func unreadK8sFields(spec v3.CalicoAPIConfigSpec) []string {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"kubeconfigInline", spec.KubeconfigInline != ""},
		{"k8sAPIEndpoint", spec.K8sAPIEndpoint != ""},
		{"k8sKeyFile", spec.K8sKeyFile != ""},
		{"k8sCertFile", spec.K8sCertFile != ""},
		{"k8sCAFile", spec.K8sCAFile != ""},
		{"k8sAPIToken", spec.K8sAPIToken != ""},
		{"k8sInsecureSkipTLSVerify", spec.K8sInsecureSkipTLSVerify},
		{"k8sDisableNodePoll", spec.K8sDisableNodePoll},
		{"k8sClientQPS", spec.K8sClientQPS != 0},
	} {
		if f.on {
			set = append(set, "spec."+f.name)
		}
	}
	if len(set) == 1 {
		set[0] += " is"
	} else if len(set) > 1 {
		set[len(set)-1] += " are"
	}
	return set
}

func loadSpec(path string, getenv func(string) string) (v3.CalicoAPIConfigSpec, error) {
	var spec v3.CalicoAPIConfigSpec
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && path == DefaultPath:
	case err != nil:
		return spec, fmt.Errorf("reading config file %s: %w", path, err)
	default:
		var cfg v3.CalicoAPIConfig
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return spec, fmt.Errorf("config file %s: %w", path, err)
		}
		if cfg.Kind != "" && cfg.Kind != v3.KindCalicoAPIConfig {
			return spec, fmt.Errorf("config file %s: kind is %q, want %s", path, cfg.Kind, v3.KindCalicoAPIConfig)
		}
		if cfg.APIVersion != "" && cfg.APIVersion != v3.APIVersion {
			return spec, fmt.Errorf("config file %s: apiVersion is %q, want %s", path, cfg.APIVersion, v3.APIVersion)
		}
		spec = cfg.Spec
	}
	for _, o := range envOverrides {
		if v := getenv(o.name); v != "" {
			o.set(&spec, v)
		} else if v := getenv("CALICO_" + o.name); v != "" {
			o.set(&spec, v)
		}
	}
	return spec, nil
}

func etcdConfig(spec v3.CalicoAPIConfigSpec) (etcdv3.Config, error) {
	switch spec.DatastoreType {
	case "", v3.DatastoreEtcdV3:
	default:
		return etcdv3.Config{}, fmt.Errorf("datastore type %q is not supported: Palisade stores its state in etcd, set datastoreType (or DATASTORE_TYPE) to %s", spec.DatastoreType, v3.DatastoreEtcdV3)
	}
	cfg := etcdv3.Config{
		Username:   spec.EtcdUsername,
		Password:   spec.EtcdPassword,
		KeyFile:    spec.EtcdKeyFile,
		CertFile:   spec.EtcdCertFile,
		CACertFile: spec.EtcdCACertFile,
		Key:        spec.EtcdKey,
		Cert:       spec.EtcdCert,
		CACert:     spec.EtcdCACert,
	}
	for _, ep := range strings.Split(spec.EtcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	return cfg, nil
}

// DefaultJoinPath is where calico-node writes the join file of the
// embedded etcd it serves (join.cfg in its default etcd data directory).
const DefaultJoinPath = "/var/lib/calico/etcd/join.cfg"

// LoadClient is Load for clients such as calicoctl: when neither the
// default file nor the environment names an endpoint, the join file at
// joinPath is read instead if it exists, so calicoctl on a node serving
// the embedded etcd reaches it with its certificate.
func LoadClient(path, joinPath string, getenv func(string) string) (etcdv3.Config, error) {
	cfg, err := Load(path, getenv)
	if err != nil || len(cfg.Endpoints) > 0 || path != DefaultPath {
		return cfg, err
	}
	if _, err := os.Stat(joinPath); err != nil {
		return cfg, nil
	}
	return Load(joinPath, getenv)
}
