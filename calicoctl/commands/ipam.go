package commands

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// newIPAMCommand is `calicoctl ipam`: show, release, check, configure and
// split over the block allocator, as Calico's calicoctl offers them.
func newIPAMCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ipam",
		Short: "IP address management: show usage, release addresses, check for leaks, configure, split pools",
	}
	cmd.AddCommand(
		newIPAMShowCommand(a),
		newIPAMReleaseCommand(a),
		newIPAMCheckCommand(a),
		newIPAMConfigureCommand(a),
		newIPAMSplitCommand(a),
	)
	return cmd
}

// ipamSession is an allocator and a resource client on one connection,
// and its raw key-value view.
type ipamSession struct {
	alloc  *ipam.Allocator
	client *client.Client
	kv     datastore.KV
	close  func()
}

// connectIPAM loads the configuration and connects the allocator.
func (a *app) connectIPAM(ctx context.Context) (*ipamSession, error) {
	cfg, err := loadConfig(a.configPath, a.env.Getenv)
	if err != nil {
		return nil, fmt.Errorf("Failed to create Calico API client: %w", err)
	}
	store, err := etcdv3.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("Failed to create Calico API client: %w", err)
	}
	return &ipamSession{
		alloc:  ipam.New(store, store.KV()),
		client: client.New(store),
		kv:     store.KV(),
		close:  func() { _ = store.Close() },
	}, nil
}

// parseIPFlag reads an --ip value.
func parseIPFlag(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("--ip is required")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("invalid IP address %q", s)
	}
	return ip.Unmap(), nil
}
