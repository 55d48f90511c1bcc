package controllers

import (
	"context"
	"errors"
	"fmt"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// tunnelHandles are the IPAM handles of a node's own tunnel addresses.
var tunnelHandles = []string{"ipip-tunnel-addr-", "vxlan-tunnel-addr-", "vxlan-v6-tunnel-addr-",
	"wireguard-tunnel-addr-", "wireguard-v6-tunnel-addr-"}

// DeleteCalicoNode removes a Calico node and what Calico's node deletion
// removes with it: the node's WorkloadEndpoints and their addresses, its
// tunnel addresses, its block affinities, the BGPPeers that name it, its
// node.<name> FelixConfiguration and BGPConfiguration, then the Node. It
// carries on past failures and returns them all; run again, it finishes.
func DeleteCalicoNode(ctx context.Context, store datastore.Interface, alloc *ipam.Allocator, name string) error {
	var errs []error
	logger := log.WithField("node", name)
	weps, _, err := store.List(ctx, datastore.ListOptions{Kind: v3.KindWorkloadEndpoint})
	if err != nil {
		return fmt.Errorf("deleting node %q: listing its workload endpoints: %w", name, err)
	}
	for _, r := range weps {
		wep := r.(*v3.WorkloadEndpoint)
		if wep.Spec.Node != name {
			continue
		}
		if alloc != nil {
			e := endpoint{containerID: wep.Spec.ContainerID, ips: wep.Spec.IPNetworks}
			if _, err := releaseEndpoint(ctx, alloc, e); err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := store.Delete(ctx, datastore.KeyOf(wep), ""); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", datastore.KeyOf(wep), err))
		}
	}
	if alloc != nil {
		for _, prefix := range tunnelHandles {
			if err := alloc.ReleaseByHandle(ctx, prefix+name); err != nil && !errors.Is(err, datastore.ErrNotFound) {
				errs = append(errs, fmt.Errorf("releasing handle %s: %w", prefix+name, err))
			}
		}
		if err := alloc.ReleaseHostAffinities(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("releasing the block affinities of %q: %w", name, err))
		}
	}
	peers, _, err := store.List(ctx, datastore.ListOptions{Kind: v3.KindBGPPeer})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing BGP peers: %w", err))
	}
	for _, r := range peers {
		if p := r.(*v3.BGPPeer); p.Spec.Node == name {
			if _, err := store.Delete(ctx, datastore.KeyOf(p), ""); err != nil && !errors.Is(err, datastore.ErrNotFound) {
				errs = append(errs, fmt.Errorf("deleting %s: %w", datastore.KeyOf(p), err))
			}
		}
	}
	for _, kind := range []string{v3.KindFelixConfiguration, v3.KindBGPConfiguration} {
		k := datastore.Key{Kind: kind, Name: "node." + name}
		if _, err := store.Delete(ctx, k, ""); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", k, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting node %q: %w (the Node is kept so the next pass finishes)", name, err)
	}
	if _, err := store.Delete(ctx, datastore.Key{Kind: v3.KindNode, Name: name}, ""); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("deleting node %q: %w", name, err)
	}
	logger.Info("Deleted the Calico node of a Kubernetes node that no longer exists, with its endpoints, addresses and configuration")
	return nil
}
