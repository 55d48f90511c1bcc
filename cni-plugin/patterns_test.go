package cniplugin

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// TestSecondInterfaceIsRefused: a second ADD of the same container with
// another CNI_IFNAME is a clear error that touches nothing of the first
// interface (veth, endpoint, address); the runtime's DEL of the refused
// interface releases nothing; the first interface's DEL releases all.
// Before, the second ADD replaced the pod's veth and left two endpoints
// with one address, and a DEL of either freed it while the other used it.
func TestSecondInterfaceIsRefused(t *testing.T) {
	c, n, list, p, ip := addOnePod(t, "10.66.0.0/16")
	veth := hostVeth(p, true)
	before := n.hostState(t, veth)

	second := *p
	second.ifName = "eth1"
	_, err := n.add(list, second.runtimeConf(true))
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || !strings.Contains(cniErr.Msg, `already has interface "eth0"`) || !strings.Contains(cniErr.Msg, `CNI_IFNAME "eth1" is refused`) {
		t.Fatalf("second ADD with CNI_IFNAME eth1: %v, want an error naming the container's interface eth0", err)
	}
	checkFirst := func(when string) {
		t.Helper()
		if hs := n.hostState(t, veth); !hs.exists || hs.ifindex != before.ifindex {
			t.Errorf("%s: the first interface's veth %s was replaced or removed: %+v (was %+v)", when, veth, hs, before)
		}
		if ep := c.endpoint(t, "team-a", wepName(n, p, true)); ep == nil || ep.Spec.IPNetworks[0] != ip.String()+"/32" {
			t.Errorf("%s: endpoint of eth0 is %+v, want it with %s", when, ep, ip)
		}
		if ep := c.endpoint(t, "team-a", wepName(n, &second, true)); ep != nil {
			t.Errorf("%s: an endpoint %s was written for eth1", when, ep.Name)
		}
		if got := c.allocated(t); len(got) != 1 || got[ip] != handleOf(p) {
			t.Errorf("%s: allocations %v, want only %s held by %s", when, got, ip, handleOf(p))
		}
	}
	checkFirst("after the refused ADD")
	if err := n.del(list, second.runtimeConf(true)); err != nil {
		t.Fatalf("DEL of the refused interface: %v", err)
	}
	checkFirst("after the refused interface's DEL")
	if err := n.del(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("DEL eth0: %v", err)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("after DEL of eth0: allocations %v left", got)
	}
	if ep := c.endpoint(t, "team-a", wepName(n, p, true)); ep != nil {
		t.Errorf("after DEL of eth0: endpoint %s left", ep.Name)
	}
}

// TestFailedAddKeepsLiveEndpointsAddresses: a repeated ADD of a container
// whose endpoint is stored (its veth gone) reuses the handle's address;
// when that ADD fails, its rollback releases only what it assigned, so the
// endpoint's address stays allocated. Before, the rollback released by
// handle and the stored endpoint claimed a free address.
func TestFailedAddKeepsLiveEndpointsAddresses(t *testing.T) {
	c, n, list, p, ip := addOnePod(t, "10.67.0.0/16")
	if err := n.inNode(func() error {
		link, err := netlink.LinkByName(hostVeth(p, true))
		if err != nil {
			return err
		}
		return netlink.LinkDel(link)
	}); err != nil {
		t.Fatalf("removing the veth: %v", err)
	}
	if _, err := n.add(confWith(t, list, "mtu", 70000), p.runtimeConf(true)); err == nil {
		t.Fatal("repeated ADD with an MTU the kernel refuses succeeded")
	}
	if ep := c.endpoint(t, "team-a", wepName(n, p, true)); ep == nil {
		t.Fatal("the stored endpoint is gone after the failed repeated ADD")
	}
	if got := c.allocated(t); got[ip] != handleOf(p) {
		t.Fatalf("after the failed repeated ADD, %s is not allocated to %s (allocations %v): the stored endpoint claims a free address", ip, handleOf(p), got)
	}
	if _, err := n.add(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("ADD again: %v", err)
	}
	if err := n.del(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("allocations %v left after DEL", got)
	}
}

// TestAddOverBadValues: bad values in etcd — pools that do not decode or
// cannot be used, and garbage under the pod's own endpoint key — do not
// stop an ADD: it gets an address of the good pool and replaces the
// garbage with its endpoint, and DEL removes it.
func TestAddOverBadValues(t *testing.T) {
	c := newCluster(t)
	n := c.newNode("node1")
	p := n.newPod("team-a", "web-1")
	for key, value := range map[string]string{
		"ippools/a-broken":   `{"kind":"IPPool",`,
		"ippools/b-bad-cidr": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"b-bad-cidr"},"spec":{"cidr":"10.1.0.0/99"}}`,
		"workloadendpoints/team-a/" + wepName(n, p, true): `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"garbage"}}`,
	} {
		if _, err := c.store.Client().Put(context.Background(), datastore.ResourcePrefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	c.addPool("z-good", "10.68.0.0/16", 26)
	list := n.calicoConf("1.0.0", nil)
	r, err := n.add(list, p.runtimeConf(true))
	if err != nil {
		t.Fatalf("ADD beside bad values: %v", err)
	}
	_, addrs := resultAddrs(t, r)
	if !netip.MustParsePrefix("10.68.0.0/16").Contains(addrs[0].Addr()) {
		t.Fatalf("ADD got %v, want an address of the good pool", addrs)
	}
	ep := c.endpoint(t, "team-a", wepName(n, p, true))
	if ep == nil || ep.Spec.ContainerID != p.containerID {
		t.Fatalf("endpoint after ADD: %+v", ep)
	}
	if err := n.del(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if ep := c.endpoint(t, "team-a", wepName(n, p, true)); ep != nil {
		t.Errorf("DEL left endpoint %s", ep.Name)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("DEL left allocations %v", got)
	}
}

// addOnePod makes a cluster with a pool of cidr and one node, and networks
// pod team-a/web-1 there through eth0; it returns the pod's address.
func addOnePod(t *testing.T, cidr string) (*cluster, *node, *libcni.NetworkConfigList, *pod, netip.Addr) {
	t.Helper()
	c := newCluster(t)
	c.addPool("pool-a", cidr, 26)
	n := c.newNode("node1")
	list := n.calicoConf("1.0.0", nil)
	p := n.newPod("team-a", "web-1")
	r, err := n.add(list, p.runtimeConf(true))
	if err != nil {
		t.Fatalf("ADD eth0: %v", err)
	}
	_, addrs := resultAddrs(t, r)
	return c, n, list, p, addrs[0].Addr()
}
