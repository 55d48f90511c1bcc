package client_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/names"
)

func wep(node, pod, ns string, ips ...string) *v3.WorkloadEndpoint {
	return &v3.WorkloadEndpoint{
		ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: names.WorkloadEndpointName(node, "k8s", pod, "eth0")},
		Spec: v3.WorkloadEndpointSpec{Node: node, Orchestrator: "k8s", Pod: pod, Endpoint: "eth0", ContainerID: "c" + pod,
			InterfaceName: "cali" + pod, IPNetworks: ips},
	}
}

// TestDeleteNodeCascades deletes node-a from a store shared with node-b
// and node-a2 (whose name starts like node-a's) and checks that exactly
// what belongs to node-a went: its endpoints' and tunnel addresses, its
// endpoints, affinities and empty blocks, its BGPPeer, node.node-a
// configurations and HostEndpoint, and the Node.
func TestDeleteNodeCascades(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: etcdtest.Start(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, alloc := client.New(store), ipam.New(store, store.KV())

	as := numorstring.ASNumber(64600)
	resources := []v3.Resource{
		&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pool"}, Spec: v3.IPPoolSpec{CIDR: "10.10.0.0/24", BlockSize: 26}},
		&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "node-a"}, Spec: v3.NodeSpec{IPv4VXLANTunnelAddr: "10.10.0.10"}},
		&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "node-b"}},
		&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "node-a2"}},
		wep("node-a", "web-1", "default", "10.10.0.1/32"),
		wep("node-a", "web-2", "prod", "10.10.0.2/32", "fd00::2/128"),
		wep("node-b", "api-1", "default", "10.10.0.5/32"),
		wep("node-a2", "db-1", "default", "10.10.0.66/32"),
		&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-a"}, Spec: v3.BGPPeerSpec{Node: "node-a", PeerIP: "198.18.0.1", ASNumber: as}},
		&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-b"}, Spec: v3.BGPPeerSpec{Node: "node-b", PeerIP: "198.18.0.2", ASNumber: as}},
		&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-all"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.3", ASNumber: as}},
		&v3.FelixConfiguration{ObjectMeta: v3.ObjectMeta{Name: "node.node-a"}},
		&v3.FelixConfiguration{ObjectMeta: v3.ObjectMeta{Name: "node.node-b"}},
		&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "node.node-a"}},
		&v3.HostEndpoint{ObjectMeta: v3.ObjectMeta{Name: "hep-a"}, Spec: v3.HostEndpointSpec{Node: "node-a", InterfaceName: "eth0"}},
		&v3.HostEndpoint{ObjectMeta: v3.ObjectMeta{Name: "hep-a2"}, Spec: v3.HostEndpointSpec{Node: "node-a2", InterfaceName: "eth0"}},
	}
	for _, r := range resources {
		if _, err := c.Create(ctx, r); err != nil {
			t.Fatalf("creating %s %s: %v", r.GetTypeMeta().Kind, r.GetObjectMeta().Name, err)
		}
	}
	// node-a's block 10.10.0.0/26 holds its two pods, its VXLAN address, a
	// leaked address and node-b's pod (borrowed); its block .128/26 is
	// empty; node-a2 has block .64/26.
	for _, a := range []struct{ ip, host, handle string }{
		{"10.10.0.1", "node-a", "k8s-pod-network.cweb-1"},
		{"10.10.0.2", "node-a", "k8s-pod-network.cweb-2"},
		{"10.10.0.10", "node-a", "vxlan-tunnel-addr-node-a"},
		{"10.10.0.3", "node-a", "k8s-pod-network.leaked"},
		{"10.10.0.5", "node-a", "k8s-pod-network.capi-1"},
		{"10.10.0.130", "node-a", "k8s-pod-network.gone"},
		{"10.10.0.66", "node-a2", "k8s-pod-network.cdb-1"},
	} {
		if err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr(a.ip), HandleID: a.handle, Hostname: a.host}); err != nil {
			t.Fatalf("assigning %s: %v", a.ip, err)
		}
	}
	if _, err := alloc.ReleaseIPs(ctx, netip.MustParseAddr("10.10.0.130")); err != nil {
		t.Fatal(err)
	}

	deleted, done, err := c.DeleteNode(ctx, alloc, "node-a", "")
	if err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if deleted.GetObjectMeta().Name != "node-a" {
		t.Errorf("deleted %v, want node-a", deleted.GetObjectMeta().Name)
	}
	wantReleased := []netip.Addr{netip.MustParseAddr("10.10.0.1"), netip.MustParseAddr("10.10.0.2"), netip.MustParseAddr("10.10.0.10")}
	if !slices.Equal(done.ReleasedIPs, wantReleased) {
		t.Errorf("released %v, want %v (fd00::2 was never allocated)", done.ReleasedIPs, wantReleased)
	}

	// What is allocated now, and where.
	blocks, err := alloc.ListBlocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, b := range blocks {
		for _, al := range b.Allocations {
			got[b.CIDR.String()+" host="+b.Host] = append(got[b.CIDR.String()+" host="+b.Host], al.IP.String())
		}
		if len(b.Allocations) == 0 {
			got[b.CIDR.String()+" host="+b.Host] = nil
		}
	}
	want := map[string][]string{
		"10.10.0.0/26 host=":         {"10.10.0.3", "10.10.0.5"},
		"10.10.0.64/26 host=node-a2": {"10.10.0.66"},
	}
	if !equalMaps(got, want) {
		t.Errorf("blocks after delete: %v, want %v (node-a's empty block deleted, the used one without affinity)", got, want)
	}
	affs, err := alloc.ListAffinities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range affs {
		if a.Host == "node-a" {
			t.Errorf("affinity of node-a to %s remains", a.CIDR)
		}
	}
	if len(affs) != 1 {
		t.Errorf("affinities %v, want only node-a2's", affs)
	}

	items, _, err := c.List(ctx, datastore.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, it := range items {
		left = append(left, datastore.KeyOf(it).String())
	}
	wantLeft := []string{}
	for _, r := range resources {
		k := datastore.KeyOf(r)
		if w, ok := r.(*v3.WorkloadEndpoint); ok && w.Spec.Node == "node-a" ||
			k.Kind == v3.KindNode && k.Name == "node-a" || k.Name == "peer-a" || k.Name == "node.node-a" || k.Name == "hep-a" {
			continue
		}
		wantLeft = append(wantLeft, datastore.KeyOf(r).String())
	}
	slices.Sort(left)
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("resources left:\n%v\nwant:\n%v", left, wantLeft)
	}
	if len(done.Deleted) != len(resources)-len(wantLeft)-1 {
		t.Errorf("cleanup reports %d deletions (%v), want %d", len(done.Deleted), done.Deleted, len(resources)-len(wantLeft)-1)
	}

	// A second delete finds no node, changes nothing and says so.
	if _, again, err := c.DeleteNode(ctx, alloc, "node-a", ""); !errors.Is(err, datastore.ErrNotFound) || len(again.ReleasedIPs)+len(again.Deleted) != 0 {
		t.Errorf("second DeleteNode: %v, %+v; want not found and nothing done", err, again)
	}
}

func equalMaps(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}
