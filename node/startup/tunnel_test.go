package startup

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

func tunnelEnv(t *testing.T) (context.Context, *client.Client, *ipam.Allocator, datastore.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s := etcdtest.NewStore(t, etcdtest.Start(t))
	c := client.New(s)
	if _, err := c.Create(ctx, &v3.Node{ObjectMeta: v3.ObjectMeta{Name: "node1", Labels: map[string]string{"zone": "a"}},
		Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.11/24"}}}); err != nil {
		t.Fatal(err)
	}
	return ctx, c, ipam.New(s, s.KV()), s
}

func applyPool(t *testing.T, ctx context.Context, c *client.Client, name, cidr string, vxlan v3.EncapMode, mutate func(*v3.IPPoolSpec)) {
	t.Helper()
	p := &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr, VXLANMode: vxlan}}
	if mutate != nil {
		mutate(&p.Spec)
	}
	if _, err := c.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func tunnelAddrs(t *testing.T, ctx context.Context, c *client.Client) (string, string) {
	t.Helper()
	n, err := getNode(ctx, c, "node1")
	if err != nil || n == nil {
		t.Fatalf("node1: %v", err)
	}
	return n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr
}

// checkHeld checks that addr is allocated with Calico's handle and
// attributes for node1's tunnel of that version.
func checkHeld(t *testing.T, ctx context.Context, alloc *ipam.Allocator, addr string, version int) {
	t.Helper()
	a, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(addr))
	if err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	wantType := map[int]string{4: "vxlanTunnelAddress", 6: "vxlanV6TunnelAddress"}[version]
	wantHandle := map[int]string{4: "vxlan-tunnel-addr-node1", 6: "vxlan-v6-tunnel-addr-node1"}[version]
	if a.HandleID != wantHandle || a.Attrs["type"] != wantType || a.Attrs["node"] != "node1" {
		t.Fatalf("%s held by %q with %v, want handle %q, type %q, node node1", addr, a.HandleID, a.Attrs, wantHandle, wantType)
	}
}

// TestTunnelAddrs follows a node's VXLAN tunnel addresses as Calico's
// allocator sets them: none without a VXLAN pool; one per family from the
// VXLAN pools (never from a Never pool, a disabled one, one not selecting
// the node or not allowing tunnel use), kept across reconciles; moved
// when its pool stops being usable and another is; released when no VXLAN
// pool is left.
func TestTunnelAddrs(t *testing.T) {
	ctx, c, alloc, _ := tunnelEnv(t)
	reconcile := func() {
		t.Helper()
		if err := ReconcileTunnelAddrs(ctx, c, alloc, "node1"); err != nil {
			t.Fatal(err)
		}
	}
	applyPool(t, ctx, c, "routed", "10.240.0.0/16", v3.EncapNever, nil)
	applyPool(t, ctx, c, "off", "10.241.0.0/16", v3.EncapAlways, func(s *v3.IPPoolSpec) { s.Disabled = true })
	applyPool(t, ctx, c, "elsewhere", "10.242.0.0/16", v3.EncapAlways, func(s *v3.IPPoolSpec) { s.NodeSelector = "zone == 'b'" })
	applyPool(t, ctx, c, "pods-only", "10.243.0.0/16", v3.EncapAlways, func(s *v3.IPPoolSpec) {
		s.AllowedUses = []v3.IPPoolAllowedUse{v3.IPPoolAllowedUse(ipam.IntentWorkload)}
	})
	reconcile()
	if v4, v6 := tunnelAddrs(t, ctx, c); v4 != "" || v6 != "" {
		t.Fatalf("tunnel addresses %q %q without a usable VXLAN pool", v4, v6)
	}

	applyPool(t, ctx, c, "cross", "10.244.0.0/16", v3.EncapCrossSubnet, nil)
	applyPool(t, ctx, c, "v6", "fd00:10:244::/48", v3.EncapAlways, nil)
	reconcile()
	v4, v6 := tunnelAddrs(t, ctx, c)
	if !netip.MustParsePrefix("10.244.0.0/16").Contains(netip.MustParseAddr(v4)) || !netip.MustParsePrefix("fd00:10:244::/48").Contains(netip.MustParseAddr(v6)) {
		t.Fatalf("tunnel addresses %q %q, want them from the VXLAN pools", v4, v6)
	}
	checkHeld(t, ctx, alloc, v4, 4)
	checkHeld(t, ctx, alloc, v6, 6)
	reconcile()
	if a, b := tunnelAddrs(t, ctx, c); a != v4 || b != v6 {
		t.Fatalf("a second reconcile moved the addresses: %s %s → %s %s", v4, v6, a, b)
	}

	// The pool stops being VXLAN; another one is: the address moves.
	applyPool(t, ctx, c, "always", "10.245.0.0/16", v3.EncapAlways, nil)
	applyPool(t, ctx, c, "cross", "10.244.0.0/16", v3.EncapNever, nil)
	reconcile()
	moved, _ := tunnelAddrs(t, ctx, c)
	if !netip.MustParsePrefix("10.245.0.0/16").Contains(netip.MustParseAddr(moved)) {
		t.Fatalf("tunnel address %q, want one from pool always", moved)
	}
	checkHeld(t, ctx, alloc, moved, 4)
	if _, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(v4)); err == nil {
		t.Fatalf("the old tunnel address %s is still allocated", v4)
	}

	// No VXLAN pool of either family left: both released, fields cleared.
	applyPool(t, ctx, c, "always", "10.245.0.0/16", v3.EncapNever, nil)
	applyPool(t, ctx, c, "v6", "fd00:10:244::/48", v3.EncapNever, nil)
	reconcile()
	if a, b := tunnelAddrs(t, ctx, c); a != "" || b != "" {
		t.Fatalf("tunnel addresses %q %q kept without a VXLAN pool", a, b)
	}
	for _, a := range []string{moved, v6} {
		if _, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(a)); err == nil {
			t.Fatalf("tunnel address %s still allocated", a)
		}
	}
}

// TestTunnelAddrsFollowPools runs the reconciler as calico-node does and
// changes pools under it: the address follows within seconds. Deleting
// the node (client.DeleteNode, as calicoctl delete node) releases it.
func TestTunnelAddrsFollowPools(t *testing.T) {
	ctx, c, alloc, s := tunnelEnv(t)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { RunTunnelAddrs(rctx, c, s, alloc, "node1"); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	wait := func(what string, ok func(v4 string) bool) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			v4, _ := tunnelAddrs(t, ctx, c)
			if ok(v4) {
				return v4
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: tunnel address %q", what, v4)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	applyPool(t, ctx, c, "always", "10.245.0.0/16", v3.EncapAlways, nil)
	addr := wait("after a VXLAN pool appeared", func(v string) bool { return v != "" })
	checkHeld(t, ctx, alloc, addr, 4)
	applyPool(t, ctx, c, "always", "10.245.0.0/16", v3.EncapNever, nil)
	wait("after the pool stopped being VXLAN", func(v string) bool { return v == "" })
	applyPool(t, ctx, c, "always", "10.245.0.0/16", v3.EncapCrossSubnet, nil)
	addr = wait("after the pool became CrossSubnet", func(v string) bool { return v != "" })
	stop()
	<-done
	if _, _, err := c.DeleteNode(ctx, alloc, "node1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(addr)); err == nil {
		t.Fatalf("tunnel address %s still allocated after the node was deleted", addr)
	}
}
