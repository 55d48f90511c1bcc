package commands

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// DefaultConfigPath is where calicoctl looks for its configuration.
const DefaultConfigPath = "/etc/calico/calicoctl.cfg"

// DefaultEtcdEndpoint is used when nothing names an endpoint.
const DefaultEtcdEndpoint = "http://127.0.0.1:2379"

// dialTimeout bounds how long calicoctl waits for the datastore to answer.
const dialTimeout = 5 * time.Second

// envOverrides maps environment variables to the config field they set.
// Calico also reads each with a CALICO_ prefix; the bare name wins.
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
}

// loadConfig reads the CalicoAPIConfig at path (a missing file at the
// default path is no error), lets the environment override it, and
// returns the etcd settings it describes.
func loadConfig(path string, getenv func(string) string) (etcdv3.Config, error) {
	var spec v3.CalicoAPIConfigSpec
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && path == DefaultConfigPath:
	case err != nil:
		return etcdv3.Config{}, fmt.Errorf("reading config file %s: %w", path, err)
	default:
		var cfg v3.CalicoAPIConfig
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return etcdv3.Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
		if cfg.Kind != "" && cfg.Kind != v3.KindCalicoAPIConfig {
			return etcdv3.Config{}, fmt.Errorf("config file %s: kind is %q, want %s", path, cfg.Kind, v3.KindCalicoAPIConfig)
		}
		if cfg.APIVersion != "" && cfg.APIVersion != v3.APIVersion {
			return etcdv3.Config{}, fmt.Errorf("config file %s: apiVersion is %q, want %s", path, cfg.APIVersion, v3.APIVersion)
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
	switch spec.DatastoreType {
	case "", v3.DatastoreEtcdV3:
	default:
		return etcdv3.Config{}, fmt.Errorf("datastore type %q is not supported: Palisade stores its state in etcd, set datastoreType (or DATASTORE_TYPE) to %s", spec.DatastoreType, v3.DatastoreEtcdV3)
	}
	if spec.EtcdKey != "" || spec.EtcdCert != "" || spec.EtcdCACert != "" {
		return etcdv3.Config{}, fmt.Errorf("inline etcdKey/etcdCert/etcdCACert are not supported: use etcdKeyFile, etcdCertFile and etcdCACertFile")
	}
	cfg := etcdv3.Config{
		Username:    spec.EtcdUsername,
		Password:    spec.EtcdPassword,
		KeyFile:     spec.EtcdKeyFile,
		CertFile:    spec.EtcdCertFile,
		CACertFile:  spec.EtcdCACertFile,
		DialTimeout: dialTimeout,
	}
	for _, ep := range strings.Split(spec.EtcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	if len(cfg.Endpoints) == 0 {
		cfg.Endpoints = []string{DefaultEtcdEndpoint}
	}
	return cfg, nil
}
