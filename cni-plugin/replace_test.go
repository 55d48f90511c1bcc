package cniplugin

import (
	"net/netip"
	"slices"
	"testing"
)

// TestAddTwiceIsIdempotent: a repeated ADD for the same container returns
// the same result and allocates nothing more.
func TestAddTwiceIsIdempotent(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.66.0.0/16", 26)
	n := c.newNode("node1")
	p := n.newPod("default", "db-0")
	list, rt := n.calicoConf("1.0.0", nil), p.runtimeConf(true)
	r1, err := n.add(list, rt)
	if err != nil {
		t.Fatalf("first ADD: %v", err)
	}
	r2, err := n.add(list, rt)
	if err != nil {
		t.Fatalf("second ADD: %v", err)
	}
	_, a1 := resultAddrs(t, r1)
	_, a2 := resultAddrs(t, r2)
	if !slices.Equal(a1, a2) {
		t.Errorf("second ADD returned %v, first %v", a2, a1)
	}
	if got := c.allocated(t); len(got) != 1 {
		t.Errorf("after two ADDs, allocated %v, want one address", got)
	}
	if err := n.check(list, rt); err != nil {
		t.Errorf("CHECK after the repeated ADD: %v", err)
	}
}

// TestNewContainerReplacesOldAndLateDelIsHarmless: a pod's sandbox is
// recreated (new container ID) before the old one's DEL arrives. The new
// ADD takes over the endpoint and frees the old addresses; the late DEL of
// the old container must not touch the new endpoint, veth or addresses.
func TestNewContainerReplacesOldAndLateDelIsHarmless(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.67.0.0/16", 26)
	n := c.newNode("node1")
	list := n.calicoConf("1.0.0", nil)
	old := n.newPod("shop", "cart-1")
	if _, err := n.add(list, old.runtimeConf(true)); err != nil {
		t.Fatalf("ADD old sandbox: %v", err)
	}
	oldIPs := c.handleIPs(t, handleOf(old))

	fresh := n.newPod("shop", "cart-1") // same pod, new sandbox and netns
	r, err := n.add(list, fresh.runtimeConf(true))
	if err != nil {
		t.Fatalf("ADD new sandbox: %v", err)
	}
	_, addrs := resultAddrs(t, r)
	newIP := addrs[0].Addr()

	if got := c.handleIPs(t, handleOf(old)); len(got) != 0 {
		t.Errorf("old sandbox's handle still holds %v after the pod was replaced (was %v)", got, oldIPs)
	}
	ep := c.endpoint(t, "shop", wepName(n, fresh, true))
	if ep == nil || ep.Spec.ContainerID != fresh.containerID {
		t.Fatalf("endpoint after replacement: %+v, want container %s", ep, fresh.containerID)
	}

	// The late DEL for the old sandbox.
	if err := n.del(list, old.runtimeConf(true)); err != nil {
		t.Fatalf("late DEL of the old sandbox: %v", err)
	}
	ep = c.endpoint(t, "shop", wepName(n, fresh, true))
	if ep == nil || ep.Spec.ContainerID != fresh.containerID {
		t.Errorf("late DEL removed or changed the new sandbox's endpoint: %+v", ep)
	}
	if got := c.handleIPs(t, handleOf(fresh)); !slices.Equal(got, []netip.Addr{newIP}) {
		t.Errorf("new sandbox's handle holds %v after the late DEL, want [%s]", got, newIP)
	}
	if hs := n.hostState(t, hostVeth(fresh, true)); !hs.exists {
		t.Errorf("late DEL removed the new sandbox's veth")
	}
	if err := n.check(list, fresh.runtimeConf(true)); err != nil {
		t.Errorf("CHECK of the new sandbox after the late DEL: %v", err)
	}
	if err := n.del(list, fresh.runtimeConf(true)); err != nil {
		t.Fatalf("DEL new sandbox: %v", err)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("addresses left after both DELs: %v", got)
	}
}
