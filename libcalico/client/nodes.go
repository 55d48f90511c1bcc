package client

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// NodeIPAM is what DeleteNode needs of the IPAM allocator; *ipam.Allocator
// has it. It is an interface so that this package does not import ipam.
type NodeIPAM interface {
	// ReleaseIPs frees addresses, returning those that were not allocated.
	ReleaseIPs(ctx context.Context, ips ...netip.Addr) ([]netip.Addr, error)
	// ReleaseHostAffinities releases every block affinity of a node,
	// deleting its empty blocks.
	ReleaseHostAffinities(ctx context.Context, host string) error
}

// NodeCleanup is what DeleteNode removed besides the Node itself.
type NodeCleanup struct {
	// ReleasedIPs are the addresses given back to IPAM: the node's
	// WorkloadEndpoints' and its tunnel addresses (those still allocated).
	ReleasedIPs []netip.Addr
	// Deleted are the other resources deleted, in order.
	Deleted []datastore.Key
}

// DeleteNode deletes Node name and everything that belongs to it, as
// Calico's client does when a Node is deleted: it releases the IP
// addresses of the node's WorkloadEndpoints and its IPIP, VXLAN and
// WireGuard tunnel addresses, deletes those WorkloadEndpoints, releases
// the node's block affinities (deleting its empty blocks; blocks still
// holding addresses lose their affinity), deletes the BGPPeers with
// spec.node == name, the FelixConfiguration and BGPConfiguration
// "node.<name>" and the HostEndpoints with spec.node == name, and finally
// the Node (at resourceVersion, when one is given).
//
// The steps run in that order and stop at the first failure, so a retry
// carries on where it stopped; what is already gone is skipped. A Node
// that does not exist is still cleaned up after, and its absence is then
// reported (datastore.ErrNotFound) with the cleanup that was done.
// calicoctl delete node and calico-kube-controllers' node controller both
// use it.
func (c *Client) DeleteNode(ctx context.Context, ipam NodeIPAM, name, resourceVersion string) (v3.Resource, NodeCleanup, error) {
	var done NodeCleanup
	nodeKey := datastore.Key{Kind: v3.KindNode, Name: name}
	if _, err := scopeKey(nodeKey); err != nil {
		return nil, done, err
	}
	logCtx := log.WithField("node", name)

	var ips []netip.Addr
	node, err := c.store.Get(ctx, nodeKey)
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		logCtx.Info("Node does not exist; cleaning up what it left")
	case err != nil:
		return nil, done, fmt.Errorf("deleting node %q: reading it: %w", name, err)
	default:
		ips = tunnelAddrs(node.(*v3.Node))
	}

	weps, err := c.ownedBy(ctx, v3.KindWorkloadEndpoint, name)
	if err != nil {
		return nil, done, err
	}
	for _, w := range weps {
		for _, n := range w.(*v3.WorkloadEndpoint).Spec.IPNetworks {
			if a, ok := addrOf(n); ok {
				ips = append(ips, a)
			} else {
				logCtx.WithField("ipNetwork", n).Warn("WorkloadEndpoint address is not an address or CIDR; not released")
			}
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	if len(ips) > 0 {
		unallocated, err := ipam.ReleaseIPs(ctx, ips...)
		if err != nil {
			return nil, done, fmt.Errorf("deleting node %q: releasing its addresses: %w", name, err)
		}
		skip := map[netip.Addr]bool{}
		for _, a := range unallocated {
			skip[a] = true
		}
		for _, a := range ips {
			if !skip[a] {
				done.ReleasedIPs = append(done.ReleasedIPs, a)
			}
		}
	}
	if err := c.deleteAll(ctx, weps, &done); err != nil {
		return nil, done, fmt.Errorf("deleting node %q: %w", name, err)
	}
	if err := ipam.ReleaseHostAffinities(ctx, name); err != nil {
		return nil, done, fmt.Errorf("deleting node %q: releasing its block affinities: %w", name, err)
	}

	peers, err := c.ownedBy(ctx, v3.KindBGPPeer, name)
	if err != nil {
		return nil, done, err
	}
	if err := c.deleteAll(ctx, peers, &done); err != nil {
		return nil, done, fmt.Errorf("deleting node %q: %w", name, err)
	}
	for _, kind := range []string{v3.KindFelixConfiguration, v3.KindBGPConfiguration} {
		k := datastore.Key{Kind: kind, Name: "node." + name}
		if err := c.deleteIfPresent(ctx, k, &done); err != nil {
			return nil, done, fmt.Errorf("deleting node %q: %w", name, err)
		}
	}
	heps, err := c.ownedBy(ctx, v3.KindHostEndpoint, name)
	if err != nil {
		return nil, done, err
	}
	if err := c.deleteAll(ctx, heps, &done); err != nil {
		return nil, done, fmt.Errorf("deleting node %q: %w", name, err)
	}

	out, err := c.store.Delete(ctx, nodeKey, resourceVersion)
	if err != nil {
		return nil, done, err
	}
	logCtx.WithFields(log.Fields{"releasedIPs": len(done.ReleasedIPs), "deleted": len(done.Deleted)}).Info("Deleted node and what belonged to it")
	return out, done, nil
}

// ownedBy lists the resources of kind whose spec.node is node.
func (c *Client) ownedBy(ctx context.Context, kind, node string) ([]v3.Resource, error) {
	items, _, err := c.store.List(ctx, datastore.ListOptions{Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("deleting node %q: listing %s resources: %w", node, kind, err)
	}
	var out []v3.Resource
	for _, it := range items {
		var owner string
		switch r := it.(type) {
		case *v3.WorkloadEndpoint:
			owner = r.Spec.Node
		case *v3.BGPPeer:
			owner = r.Spec.Node
		case *v3.HostEndpoint:
			owner = r.Spec.Node
		}
		if owner == node {
			out = append(out, it)
		}
	}
	return out, nil
}

// deleteAll deletes rs, each at the version it was read at.
func (c *Client) deleteAll(ctx context.Context, rs []v3.Resource, done *NodeCleanup) error {
	for _, r := range rs {
		k := datastore.KeyOf(r)
		if _, err := c.store.Delete(ctx, k, r.GetObjectMeta().ResourceVersion); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return fmt.Errorf("deleting %s: %w", k, err)
		}
		done.Deleted = append(done.Deleted, k)
	}
	return nil
}

// deleteIfPresent deletes k unless it does not exist.
func (c *Client) deleteIfPresent(ctx context.Context, k datastore.Key, done *NodeCleanup) error {
	_, err := c.store.Delete(ctx, k, "")
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s: %w", k, err)
	}
	done.Deleted = append(done.Deleted, k)
	return nil
}

// tunnelAddrs are the IPIP, VXLAN and WireGuard addresses IPAM gave node.
func tunnelAddrs(n *v3.Node) []netip.Addr {
	var in []string
	if n.Spec.BGP != nil {
		in = append(in, n.Spec.BGP.IPv4IPIPTunnelAddr)
	}
	in = append(in, n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr)
	if n.Spec.Wireguard != nil {
		in = append(in, n.Spec.Wireguard.InterfaceIPv4Address, n.Spec.Wireguard.InterfaceIPv6Address)
	}
	var out []netip.Addr
	for _, s := range in {
		if a, ok := addrOf(s); ok {
			out = append(out, a)
		}
	}
	return out
}

// addrOf reads "10.0.0.1" or "10.0.0.1/32".
func addrOf(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Addr().Unmap(), err == nil
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}
