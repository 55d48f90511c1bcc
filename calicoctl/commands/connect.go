package commands

import (
	"context"
	"fmt"

	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// connect loads the configuration and returns a client over etcd, and a
// function that closes the connection.
func (a *app) connect(ctx context.Context) (*client.Client, func(), error) {
	cfg, err := loadConfig(a.configPath, a.env.Getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("Failed to create Calico API client: %w", err)
	}
	store, err := etcdv3.New(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("Failed to create Calico API client: %w", err)
	}
	return client.New(store), func() { _ = store.Close() }, nil
}
