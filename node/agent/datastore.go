package agent

import (
	"time"

	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// DefaultConfigPath is the calicoctl-style file the agent reads the
// datastore settings from when it exists.
const DefaultConfigPath = apiconfig.DefaultPath

// datastoreConfig reads the etcd settings as calicoctl does (the
// CalicoAPIConfig at path, then the environment). No endpoints means the
// agent serves the embedded etcd.
func datastoreConfig(path string, getenv func(string) string) (etcdv3.Config, error) {
	cfg, err := apiconfig.Load(path, getenv)
	if err != nil {
		return etcdv3.Config{}, err
	}
	cfg.DialTimeout = 10 * time.Second
	return cfg, nil
}
