package netconf

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
)

// EtcdConfig is how to reach the etcd datastore the configuration names;
// settings missing from it fall back to the ETCD_ENDPOINTS,
// ETCD_KEY_FILE, ETCD_CERT_FILE and ETCD_CA_CERT_FILE environment
// variables.
func (c *NetConf) EtcdConfig() (etcdhttp.Config, error) {
	pick := func(v, env string) string {
		if v != "" {
			return v
		}
		return os.Getenv(env)
	}
	cfg := etcdhttp.Config{
		KeyFile:     pick(c.EtcdKeyFile, "ETCD_KEY_FILE"),
		CertFile:    pick(c.EtcdCertFile, "ETCD_CERT_FILE"),
		CACertFile:  pick(c.EtcdCACertFile, "ETCD_CA_CERT_FILE"),
		DialTimeout: c.Timeout(),
	}
	for _, e := range strings.Split(pick(c.EtcdEndpoints, "ETCD_ENDPOINTS"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Endpoints = append(cfg.Endpoints, e)
		}
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("network %q: etcd_endpoints is required (or ETCD_ENDPOINTS in the environment)", c.Name), "")
	}
	return cfg, nil
}

// Connect opens the etcd datastore and checks that it answers (for
// STATUS); an unreachable datastore is a "try again later" CNI error. The
// connection is the lean client over etcd's JSON gateway, so the plugins
// link no gRPC.
func (c *NetConf) Connect(ctx context.Context) (*etcdhttp.Store, error) {
	cfg, err := c.EtcdConfig()
	if err != nil {
		return nil, err
	}
	store, err := etcdhttp.New(ctx, cfg)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("connecting to the datastore: %v", err), "")
	}
	return store, nil
}

// Open prepares the etcd datastore connection without a request: the
// first request of the invocation connects, so a datastore that does not
// answer fails that request (see session.Retryable).
func (c *NetConf) Open() (*etcdhttp.Store, error) {
	cfg, err := c.EtcdConfig()
	if err != nil {
		return nil, err
	}
	store, err := etcdhttp.Open(cfg)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("connecting to the datastore: %v", err), "")
	}
	return store, nil
}
