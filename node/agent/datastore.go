package agent

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

// DefaultConfigPath is the calicoctl-style file the agent reads the
// datastore settings from when it exists.
const DefaultConfigPath = "/etc/calico/calicoctl.cfg"

// datastoreConfig reads the etcd settings as calicoctl does: the
// CalicoAPIConfig at path (absent at the default path is fine), then
// ETCD_* (or CALICO_ETCD_*) from the environment. No endpoints means the
// agent serves the embedded etcd.
func datastoreConfig(path string, getenv func(string) string) (etcdv3.Config, error) {
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
		spec = cfg.Spec
	}
	for _, o := range []struct {
		name string
		set  *string
	}{
		{"DATASTORE_TYPE", &spec.DatastoreType},
		{"ETCD_ENDPOINTS", &spec.EtcdEndpoints},
		{"ETCD_USERNAME", &spec.EtcdUsername},
		{"ETCD_PASSWORD", &spec.EtcdPassword},
		{"ETCD_KEY_FILE", &spec.EtcdKeyFile},
		{"ETCD_CERT_FILE", &spec.EtcdCertFile},
		{"ETCD_CA_CERT_FILE", &spec.EtcdCACertFile},
	} {
		if v := getenv(o.name); v != "" {
			*o.set = v
		} else if v := getenv("CALICO_" + o.name); v != "" {
			*o.set = v
		}
	}
	switch spec.DatastoreType {
	case "", v3.DatastoreEtcdV3:
	default:
		return etcdv3.Config{}, fmt.Errorf("datastore type %q is not supported: Palisade stores its state in etcd (%s)", spec.DatastoreType, v3.DatastoreEtcdV3)
	}
	cfg := etcdv3.Config{
		Username: spec.EtcdUsername, Password: spec.EtcdPassword,
		KeyFile: spec.EtcdKeyFile, CertFile: spec.EtcdCertFile, CACertFile: spec.EtcdCACertFile,
		DialTimeout: 10 * time.Second,
	}
	for _, ep := range strings.Split(spec.EtcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	return cfg, nil
}
