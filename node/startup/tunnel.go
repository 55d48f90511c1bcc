package startup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/selector"
)

// TunnelIPAM is what the tunnel address reconciler needs of IPAM;
// *ipam.Allocator has it.
type TunnelIPAM interface {
	AutoAssign(ctx context.Context, args ipam.AutoAssignArgs) (v4, v6 *ipam.Assignments, err error)
	ReleaseByHandle(ctx context.Context, handleID string) error
	GetAssignmentAttributes(ctx context.Context, ip netip.Addr) (ipam.Allocation, error)
}

// ReconcileTunnelAddrs gives node a VXLAN tunnel address of each IP
// family that has an enabled VXLAN pool (vxlanMode Always or CrossSubnet)
// selecting it, and takes it away from a family that has none, as
// Calico's tunnel address allocator does: handle
// vxlan-tunnel-addr-<node> (vxlan-v6-tunnel-addr-<node>), attributes
// node and type vxlanTunnelAddress (vxlanV6TunnelAddress), the address
// in Node.spec.ipv4VXLANTunnelAddr (ipv6VXLANTunnelAddr). An address
// still held by the handle in a usable pool is kept; one in a pool no
// longer usable is released and replaced.
func ReconcileTunnelAddrs(ctx context.Context, c *client.Client, alloc TunnelIPAM, node string) error {
	n, err := getNode(ctx, c, node)
	if err != nil {
		return err
	}
	if n == nil {
		return nil // deleted: client.DeleteNode released its addresses
	}
	rs, _, err := c.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return fmt.Errorf("listing IP pools: %w", err)
	}
	for _, version := range []int{4, 6} {
		pools := vxlanPools(rs, n, version)
		if err := reconcileTunnelAddr(ctx, c, alloc, n, version, pools); err != nil {
			return err
		}
		if n, err = getNode(ctx, c, node); err != nil || n == nil {
			return err
		}
	}
	return nil
}

// vxlanPools are the enabled VXLAN pools of a family that select n.
func vxlanPools(rs []v3.Resource, n *v3.Node, version int) []v3.IPPool {
	var out []v3.IPPool
	for _, r := range rs {
		p, ok := r.(*v3.IPPool)
		if !ok || p.Spec.Disabled || (p.Spec.VXLANMode != v3.EncapAlways && p.Spec.VXLANMode != v3.EncapCrossSubnet) {
			continue
		}
		cidr, err := netip.ParsePrefix(p.Spec.CIDR)
		if err != nil || cidr.Addr().Is4() != (version == 4) {
			continue
		}
		if len(p.Spec.AllowedUses) > 0 && !slices.Contains(p.Spec.AllowedUses, v3.IPPoolAllowedUse(ipam.IntentTunnel)) {
			continue
		}
		if s := p.Spec.NodeSelector; s != "" && s != "all()" {
			sel, err := selector.Parse(s)
			if err != nil || !sel.Evaluate(selector.MapLabels(n.Labels)) {
				continue
			}
		}
		out = append(out, *p)
	}
	return out
}

func tunnelField(n *v3.Node, version int) *string {
	if version == 6 {
		return &n.Spec.IPv6VXLANTunnelAddr
	}
	return &n.Spec.IPv4VXLANTunnelAddr
}

func reconcileTunnelAddr(ctx context.Context, c *client.Client, alloc TunnelIPAM, n *v3.Node, version int, pools []v3.IPPool) error {
	handle := ipam.VXLANTunnelHandle(n.Name, version)
	attrs := ipam.VXLANTunnelAttrs(n.Name, version)
	logc := log.WithFields(log.Fields{"node": n.Name, "type": attrs[ipam.AttrType]})
	cur := *tunnelField(n, version)
	release := func() error {
		if err := alloc.ReleaseByHandle(ctx, handle); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return fmt.Errorf("releasing tunnel address handle %q: %w", handle, err)
		}
		return nil
	}
	if len(pools) == 0 {
		if err := release(); err != nil {
			return err
		}
		if cur != "" {
			logc.WithField("address", cur).Info("No VXLAN pool selects this node any more: tunnel address released")
			return setTunnelAddr(ctx, c, n.Name, version, "")
		}
		return nil
	}
	if cur != "" {
		addr, err := netip.ParseAddr(cur)
		if err == nil {
			al, aerr := alloc.GetAssignmentAttributes(ctx, addr)
			if aerr == nil && al.HandleID == handle && inPools(addr, pools) {
				return nil // still ours, in a usable pool
			}
			if aerr == nil && al.HandleID == handle {
				logc.WithField("address", cur).Info("Tunnel address is in a pool no longer usable: replacing it")
			} else {
				logc.WithField("address", cur).Info("Tunnel address is not allocated to this node: assigning another")
			}
		}
	}
	if err := release(); err != nil {
		return err
	}
	args := ipam.AutoAssignArgs{HandleID: handle, Attrs: attrs, Hostname: n.Name, Intent: ipam.IntentTunnel}
	for _, p := range pools {
		if version == 4 {
			args.IPv4Pools = append(args.IPv4Pools, p.Name)
		} else {
			args.IPv6Pools = append(args.IPv6Pools, p.Name)
		}
	}
	if version == 4 {
		args.Num4 = 1
	} else {
		args.Num6 = 1
	}
	v4, v6, err := alloc.AutoAssign(ctx, args)
	got := v4
	if version == 6 {
		got = v6
	}
	if err != nil || got == nil || len(got.IPs) == 0 {
		_ = release()
		return fmt.Errorf("assigning a VXLAN tunnel address (IPv%d) to node %q: %w", version, n.Name, err)
	}
	addr := got.IPs[0].Addr().String()
	if err := setTunnelAddr(ctx, c, n.Name, version, addr); err != nil {
		_ = release()
		return err
	}
	logc.WithField("address", addr).Info("Assigned the VXLAN tunnel address")
	return nil
}

func inPools(a netip.Addr, pools []v3.IPPool) bool {
	for _, p := range pools {
		if c, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && c.Contains(a) {
			return true
		}
	}
	return false
}

// setTunnelAddr writes the address into the Node, retrying on a
// concurrent update.
func setTunnelAddr(ctx context.Context, c *client.Client, name string, version int, addr string) error {
	for attempt := 0; ; attempt++ {
		n, err := getNode(ctx, c, name)
		if err != nil || n == nil {
			return err
		}
		cp := *n
		if *tunnelField(&cp, version) == addr {
			return nil
		}
		*tunnelField(&cp, version) = addr
		_, err = c.Update(ctx, &cp)
		if err == nil {
			return nil
		}
		if !errors.Is(err, datastore.ErrConflict) || attempt >= 10 {
			return fmt.Errorf("writing the VXLAN tunnel address of node %q: %w", name, err)
		}
	}
}

// RunTunnelAddrs reconciles node's tunnel addresses now and whenever an
// IPPool or the Node changes, until ctx ends (Calico's tunnel address
// allocator in daemon mode). A failed round is retried with backoff.
func RunTunnelAddrs(ctx context.Context, c *client.Client, store datastore.Interface, alloc TunnelIPAM, node string) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	for _, kind := range []string{v3.KindIPPool, v3.KindNode} {
		go watchPoke(ctx, store, kind, node, poke)
	}
	poke()
	retry := time.Duration(0)
	for {
		var after <-chan time.Time
		if retry > 0 {
			after = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-after:
		}
		if err := ReconcileTunnelAddrs(ctx, c, alloc, node); err != nil && ctx.Err() == nil {
			retry = min(max(retry*2, 100*time.Millisecond), 10*time.Second)
			log.WithError(err).WithField("retryIn", retry).Warn("Reconciling the VXLAN tunnel addresses failed")
			continue
		}
		retry = 0
	}
}

// watchPoke pokes on every change of kind (of the Node named node only,
// for Nodes), watching again after errors.
func watchPoke(ctx context.Context, store datastore.Interface, kind, node string, poke func()) {
	for ctx.Err() == nil {
		w, err := store.Watch(ctx, datastore.ListOptions{Kind: kind}, "")
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		poke() // whatever happened while not watching
		for ev := range w.Events() {
			if ev.Type == datastore.Error {
				continue
			}
			if kind == v3.KindNode && (ev.Object == nil || ev.Object.GetObjectMeta().Name != node) {
				continue
			}
			poke()
		}
		w.Stop()
	}
}
