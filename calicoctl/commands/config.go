package commands

import (
	"time"

	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// DefaultConfigPath is where calicoctl looks for its configuration.
const DefaultConfigPath = apiconfig.DefaultPath

// DefaultEtcdEndpoint is used when nothing names an endpoint and there is
// no join file: where calico-node serves its embedded etcd when told to
// use plain HTTP.
const DefaultEtcdEndpoint = "http://127.0.0.1:2379"

// dialTimeout bounds how long calicoctl waits for the datastore to answer.
const dialTimeout = 5 * time.Second

// loadConfig reads the CalicoAPIConfig at path and the environment (or,
// when they name no endpoint, the join file of the embedded etcd on this
// node), and returns the etcd settings, with the default endpoint when
// none is named.
func loadConfig(path string, getenv func(string) string) (etcdv3.Config, error) {
	cfg, err := apiconfig.LoadClient(path, apiconfig.DefaultJoinPath, getenv)
	if err != nil {
		return etcdv3.Config{}, err
	}
	if len(cfg.Endpoints) == 0 {
		cfg.Endpoints = []string{DefaultEtcdEndpoint}
	}
	cfg.DialTimeout = dialTimeout
	return cfg, nil
}
