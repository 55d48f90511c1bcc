package startup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// getNode reads the stored Node named name, or nil when there is none.
func getNode(ctx context.Context, c *client.Client, name string) (*v3.Node, error) {
	r, err := c.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: name})
	if errors.Is(err, datastore.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, datastore.ErrBadValue) {
		// Logged by the store; writeNode replaces it.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %q: %w", name, err)
	}
	n, ok := r.(*v3.Node)
	if !ok {
		return nil, fmt.Errorf("node %q: stored value is a %T", name, r)
	}
	return n, nil
}

// writeNode creates the Node or updates the stored one with the node's
// BGP identity: its addresses and, when cfgAS is set, its AS number; and,
// when k8sRef is set, its Kubernetes orchRef.
func writeNode(ctx context.Context, c *client.Client, stored *v3.Node, name string, v4, v6 Address, cfgAS, k8sRef string) (*v3.Node, error) {
	n := stored
	if n == nil {
		n = &v3.Node{ObjectMeta: v3.ObjectMeta{Name: name}}
	} else {
		cp := *n
		n = &cp
	}
	bgp := &v3.NodeBGPSpec{}
	if n.Spec.BGP != nil {
		cp := *n.Spec.BGP
		bgp = &cp
	}
	bgp.IPv4Address, bgp.IPv6Address = "", ""
	if v4.Prefix.IsValid() {
		bgp.IPv4Address = v4.Prefix.String()
	}
	if v6.Prefix.IsValid() {
		bgp.IPv6Address = v6.Prefix.String()
	}
	if cfgAS != "" {
		as, err := numorstring.ASNumberFromString(cfgAS)
		if err != nil {
			return nil, fmt.Errorf("AS %q: %w", cfgAS, err)
		}
		bgp.ASNumber = &as
	}
	if *bgp == (v3.NodeBGPSpec{}) {
		bgp = nil
	}
	n.Spec.BGP = bgp
	n.Spec.Addresses = nodeAddresses(n.Spec.Addresses, v4, v6)
	if k8sRef != "" {
		refs := []v3.OrchRef{{Orchestrator: "k8s", NodeName: k8sRef}}
		for _, o := range n.Spec.OrchRefs {
			if o.Orchestrator != "k8s" {
				refs = append(refs, o)
			}
		}
		n.Spec.OrchRefs = refs
	}

	var (
		out v3.Resource
		err error
	)
	if stored == nil {
		// An apply, so that a stored value that is not a valid Node is
		// replaced rather than blocking the node's start.
		out, err = c.Apply(ctx, n)
	} else {
		out, err = c.Update(ctx, n)
	}
	if err != nil {
		return nil, fmt.Errorf("writing node %q: %w", name, err)
	}
	return out.(*v3.Node), nil
}

// nodeAddresses replaces the CalicoNodeIP entries of addrs with the node's
// current addresses and keeps the others (written by orchestrators).
func nodeAddresses(addrs []v3.NodeAddress, v4, v6 Address) []v3.NodeAddress {
	var out []v3.NodeAddress
	for _, a := range addrs {
		if a.Type != v3.NodeAddressCalicoNodeIP {
			out = append(out, a)
		}
	}
	for _, a := range []Address{v4, v6} {
		if a.Prefix.IsValid() {
			out = append(out, v3.NodeAddress{Address: a.Prefix.String(), Type: v3.NodeAddressCalicoNodeIP})
		}
	}
	return out
}

// ensurePools creates the default pool of each family that has none.
// It returns the names of the pools it created.
func ensurePools(ctx context.Context, c *client.Client, cfg *Config) ([]string, error) {
	rs, _, err := c.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, fmt.Errorf("listing IP pools: %w", err)
	}
	var have4, have6 bool
	for _, r := range rs {
		p, ok := r.(*v3.IPPool)
		if !ok {
			continue
		}
		pfx, err := parseAddress(p.Spec.CIDR)
		if err != nil {
			continue
		}
		if pfx.Addr().Is6() {
			have6 = true
		} else {
			have4 = true
		}
	}
	var created []string
	for _, want := range []struct {
		name string
		pc   PoolConfig
		have bool
	}{
		{DefaultIPv4PoolName, cfg.IPv4Pool, have4},
		{DefaultIPv6PoolName, cfg.IPv6Pool, have6},
	} {
		logger := log.WithFields(log.Fields{"pool": want.name, "cidr": want.pc.CIDR})
		if want.pc.CIDR == "" {
			continue
		}
		if want.have {
			logger.Info("An IP pool of this family exists; not creating the default pool")
			continue
		}
		pool := &v3.IPPool{
			ObjectMeta: v3.ObjectMeta{Name: want.name},
			Spec: v3.IPPoolSpec{
				CIDR: want.pc.CIDR, BlockSize: want.pc.BlockSize, NATOutgoing: want.pc.NATOutgoing,
				VXLANMode: want.pc.VXLANMode, IPIPMode: want.pc.IPIPMode, NodeSelector: want.pc.NodeSelector,
			},
		}
		if _, err := c.Create(ctx, pool); err != nil {
			if errors.Is(err, datastore.ErrAlreadyExists) {
				logger.Info("The default pool was created meanwhile")
				continue
			}
			return created, fmt.Errorf("creating default pool: %w", err)
		}
		logger.Info("Created the default IP pool")
		created = append(created, want.name)
	}
	return created, nil
}

// ensureClusterInfo creates ClusterInformation "default" when missing
// (with a fresh cluster GUID), and marks the datastore ready when nobody
// has said otherwise.
func ensureClusterInfo(ctx context.Context, c *client.Client, clusterType string) error {
	key := datastore.Key{Kind: v3.KindClusterInformation, Name: "default"}
	r, err := c.Get(ctx, key)
	replace := errors.Is(err, datastore.ErrBadValue) // logged by the store
	switch {
	case errors.Is(err, datastore.ErrNotFound) || replace:
		guid := make([]byte, 16)
		if _, err := rand.Read(guid); err != nil {
			return fmt.Errorf("making a cluster GUID: %w", err)
		}
		ready := true
		ci := &v3.ClusterInformation{
			ObjectMeta: v3.ObjectMeta{Name: "default"},
			Spec: v3.ClusterInformationSpec{
				ClusterGUID: hex.EncodeToString(guid), ClusterType: clusterType,
				CalicoVersion: buildinfo.Get().Version, DatastoreReady: &ready,
			},
		}
		write := c.Create
		if replace {
			write = c.Apply
		}
		if _, err := write(ctx, ci); err != nil && !errors.Is(err, datastore.ErrAlreadyExists) {
			return fmt.Errorf("creating %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", key, err)
	}
	ci, ok := r.(*v3.ClusterInformation)
	if !ok {
		return fmt.Errorf("%s: stored value is a %T", key, r)
	}
	if ci.Spec.DatastoreReady != nil && ci.Spec.CalicoVersion == buildinfo.Get().Version {
		return nil
	}
	cp := *ci
	if cp.Spec.DatastoreReady == nil {
		ready := true
		cp.Spec.DatastoreReady = &ready
	}
	cp.Spec.CalicoVersion = buildinfo.Get().Version
	if _, err := c.Update(ctx, &cp); err != nil {
		return fmt.Errorf("updating %s: %w", key, err)
	}
	return nil
}

// writeNodename writes the node name where the CNI plugin reads it.
func writeNodename(path, name string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing nodename file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(name), 0o644); err != nil {
		return fmt.Errorf("writing nodename file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing nodename file: %w", err)
	}
	return nil
}
