package calc

import (
	"flag"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/golden"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under felix/calc/testdata")

// overlayRecorder keeps the last overlay the graph passed.
type overlayRecorder struct {
	*recorder
	overlay *Overlay
	sends   int
}

func (r *overlayRecorder) OnOverlayUpdate(o *Overlay) { r.overlay = o; r.sends++ }

func node(name, v4, v6, tun4, tun6, mac string) *v3.Node {
	n := &v3.Node{ObjectMeta: v3.ObjectMeta{Name: name}}
	if v4 != "" || v6 != "" {
		n.Spec.BGP = &v3.NodeBGPSpec{IPv4Address: v4, IPv6Address: v6}
	}
	n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = tun4, tun6, mac
	return n
}

func pool(name, cidr string, vxlan, ipip v3.EncapMode) *v3.IPPool {
	return &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr, VXLANMode: vxlan, IPIPMode: ipip}}
}

func block(cidr, host string, borrowed ...string) *Block {
	b := &Block{TypeMeta: v3.TypeMeta{Kind: KindIPAMBlock}, ObjectMeta: v3.ObjectMeta{Name: cidr}, CIDR: netip.MustParsePrefix(cidr), Host: host}
	for i := 0; i+1 < len(borrowed); i += 2 {
		if b.Borrowed == nil {
			b.Borrowed = map[netip.Addr]string{}
		}
		b.Borrowed[netip.MustParseAddr(borrowed[i])] = borrowed[i+1]
	}
	return b
}

func upd(r v3.Resource) Update {
	switch x := r.(type) {
	case *Block:
		return Update{Key: datastore.Key{Kind: KindIPAMBlock, Name: x.CIDR.String()}, Value: x}
	case *v3.Node:
		return Update{Key: datastore.Key{Kind: v3.KindNode, Name: x.Name}, Value: x}
	case *v3.IPPool:
		return Update{Key: datastore.Key{Kind: v3.KindIPPool, Name: x.Name}, Value: x}
	}
	panic("unknown")
}

func gone(kind, name string) Update { return Update{Key: datastore.Key{Kind: kind, Name: name}} }

// overlayCluster is node1's view of a cluster with nodes in two subnets
// (198.18.0.0/24 and 198.18.1.0/24) and pools of every mode.
func overlayCluster() []Update {
	return []Update{
		upd(pool("cross", "10.244.0.0/16", v3.EncapCrossSubnet, "")),
		upd(pool("always", "10.245.0.0/16", v3.EncapAlways, "")),
		upd(pool("routed", "10.246.0.0/16", v3.EncapNever, "")),
		upd(pool("ipip", "10.247.0.0/16", "", v3.EncapAlways)),
		upd(pool("v6", "fd00:10:244::/48", v3.EncapAlways, "")),
		upd(node("node1", "198.18.0.11/24", "fd00:198:18::11/64", "10.244.0.1", "fd00:10:244::1", "")),
		upd(node("node2", "198.18.0.12/24", "", "10.244.1.1", "", "66:aa:bb:cc:dd:ee")),
		upd(node("node3", "198.18.1.13/24", "fd00:198:18:1::13/64", "10.244.2.1", "fd00:10:244:2::1", "")),
		upd(node("node4", "198.18.1.14/24", "", "", "", "")), // no tunnel address yet
		upd(block("10.244.0.0/26", "node1", "10.244.0.9", "node3")),
		upd(block("10.244.1.0/26", "node2")),
		upd(block("10.244.2.0/26", "node3", "10.244.2.5", "node2")),
		upd(block("10.244.4.0/26", "node4")),
		upd(block("10.244.9.0/26", "")),
		upd(block("10.245.1.0/26", "node2")),
		upd(block("10.246.1.0/26", "node2")),
		upd(block("10.247.1.0/26", "node3")),
		upd(block("fd00:10:244:2::/122", "node3")),
		upd(block("fd00:10:244::/122", "node1")),
	}
}

func runOverlay(updates []Update, flushEvery int) *overlayRecorder {
	rec := &overlayRecorder{recorder: newRecorder()}
	g := NewGraph("node1", rec)
	g.OnInSync()
	for i, u := range updates {
		g.OnUpdate(u)
		if flushEvery > 0 && i%flushEvery == 0 {
			g.Flush()
		}
	}
	g.Flush()
	return rec
}

// TestOverlayGolden checks the routes, VTEPs (neighbour and FDB entries)
// node1 computes: Always pools through the tunnel, a CrossSubnet pool's
// block on a node of node1's subnet direct and the others through the
// tunnel, no route for Never pools, node1's own blocks, unaffine blocks or
// a node without a tunnel address; borrowed addresses get /32 routes to
// the node holding them; IPv6 the same over the v6 VTEPs.
func TestOverlayGolden(t *testing.T) {
	rec := runOverlay(overlayCluster(), 0)
	if rec.overlay == nil {
		t.Fatal("no overlay passed")
	}
	golden.Check(t, filepath.Join("testdata", "overlay.golden"), rec.overlay.String(), *updateGolden)
}

// TestOverlayOrder feeds the same cluster in many orders, flushed after
// every update, every few, or once: the overlay is always the same, and
// one more flush with nothing new sends nothing.
func TestOverlayOrder(t *testing.T) {
	want := runOverlay(overlayCluster(), 0).overlay.String()
	r := rand.New(rand.NewPCG(16, 4789))
	for i := 0; i < 200; i++ {
		us := overlayCluster()
		r.Shuffle(len(us), func(a, b int) { us[a], us[b] = us[b], us[a] })
		rec := runOverlay(us, r.IntN(4))
		if got := rec.overlay.String(); got != want {
			t.Fatalf("order %d: overlay differs:\n%s\nwant\n%s", i, got, want)
		}
	}
}

// TestOverlayChanges follows a cluster through changes: a pool switched
// from CrossSubnet to Always turns the direct route into a tunnel route; a
// node gone takes its routes and VTEP; a block gone takes its route; the
// node's own tunnel address gone takes its VTEP (and so its device) but
// not the direct routes; nothing changed sends nothing.
func TestOverlayChanges(t *testing.T) {
	rec := &overlayRecorder{recorder: newRecorder()}
	g := NewGraph("node1", rec)
	g.OnInSync()
	g.OnUpdates(overlayCluster())
	g.Flush()
	sends := rec.sends
	g.OnUpdate(upd(node("node4", "198.18.1.14/24", "", "", "", ""))) // the same again
	g.OnUpdate(upd(block("10.244.2.0/26", "node3", "10.244.2.5", "node2")))
	g.Flush()
	if rec.sends != sends {
		t.Fatalf("an unchanged update sent the overlay again")
	}
	steps := []struct {
		name    string
		updates []Update
	}{
		{"cross-to-always", []Update{upd(pool("cross", "10.244.0.0/16", v3.EncapAlways, ""))}},
		{"node3-gone", []Update{gone(v3.KindNode, "node3")}},
		{"block-gone", []Update{gone(KindIPAMBlock, "10.245.1.0/26")}},
		{"back-to-cross", []Update{upd(pool("cross", "10.244.0.0/16", v3.EncapCrossSubnet, ""))}},
		{"local-tunnel-gone", []Update{upd(node("node1", "198.18.0.11/24", "fd00:198:18::11/64", "", "", ""))}},
		{"vxlan-off", []Update{upd(pool("cross", "10.244.0.0/16", v3.EncapNever, "")), upd(pool("always", "10.245.0.0/16", v3.EncapNever, ""))}},
	}
	var out strings.Builder
	for _, s := range steps {
		g.OnUpdates(s.updates)
		g.Flush()
		out.WriteString("## " + s.name + "\n" + rec.overlay.String())
	}
	golden.Check(t, filepath.Join("testdata", "overlay_changes.golden"), out.String(), *updateGolden)
}

// TestVTEPMAC checks the MAC derived from a node name, as Calico's felix
// derives it.
func TestVTEPMAC(t *testing.T) {
	for _, c := range []struct {
		node    string
		version int
	}{{"node1", 4}, {"node1", 6}} {
		m := VTEPMAC(c.node, c.version)
		if !strings.HasPrefix(m, "66:") || len(m) != 17 {
			t.Fatalf("%s v%d: %s", c.node, c.version, m)
		}
	}
	if VTEPMAC("node1", 4) == VTEPMAC("node1", 6) || VTEPMAC("node1", 4) == VTEPMAC("node2", 4) {
		t.Fatal("MACs collide")
	}
}

func wepUpd(name, node string, nets ...string) Update {
	w := &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint}, ObjectMeta: v3.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: v3.WorkloadEndpointSpec{Node: node, IPNetworks: nets, InterfaceName: "cali" + name}}
	return Update{Key: datastore.KeyOf(w), Value: w}
}

// workloadIPsCluster is overlayCluster with routeSource WorkloadIPs and
// workloads of every node, some at addresses no block holds (host-local
// IPAM).
func workloadIPsCluster() []Update {
	fc := &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.FelixConfigurationSpec{RouteSource: "WorkloadIPs"}}
	return append(overlayCluster(),
		Update{Key: datastore.KeyOf(fc), Value: fc},
		wepUpd("a", "node1", "10.244.0.3/32"),
		wepUpd("b", "node2", "10.244.1.5/32", "10.245.7.2/32"),
		wepUpd("c", "node3", "10.244.77.7/32", "fd00:10:244:77::7/128"),
		wepUpd("d", "node2", "10.246.1.9/32"),
		wepUpd("e", "node4", "10.245.9.9/32"),
	)
}

// TestOverlayWorkloadIPs: with routeSource WorkloadIPs the routes are one
// per address of another node's workload in a VXLAN pool, whether or not
// a block holds it (host-local IPAM), through the tunnel or direct as the
// pool's mode says, and none from blocks (nor local blocks kept); in any
// order of the same inputs; back to CalicoIPAM, the block routes return.
func TestOverlayWorkloadIPs(t *testing.T) {
	want := runOverlay(workloadIPsCluster(), 0).overlay.String()
	r := rand.New(rand.NewPCG(29, 4789))
	for i := 0; i < 100; i++ {
		us := workloadIPsCluster()
		r.Shuffle(len(us), func(a, b int) { us[a], us[b] = us[b], us[a] })
		if got := runOverlay(us, r.IntN(4)).overlay.String(); got != want {
			t.Fatalf("order %d: overlay differs:\n%s\nwant\n%s", i, got, want)
		}
	}
	rec := &overlayRecorder{recorder: newRecorder()}
	g := NewGraph("node1", rec)
	g.OnInSync()
	g.OnUpdates(workloadIPsCluster())
	g.Flush()
	var out strings.Builder
	out.WriteString("## WorkloadIPs\n" + rec.overlay.String())
	g.OnUpdates([]Update{{Key: datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: "ns", Name: "c"}}, wepUpd("b", "node2", "10.244.1.6/32")})
	g.Flush()
	out.WriteString("## workload c gone, b moved\n" + rec.overlay.String())
	fc := &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"}}
	g.OnUpdate(Update{Key: datastore.KeyOf(fc), Value: fc})
	g.Flush()
	out.WriteString("## CalicoIPAM\n" + rec.overlay.String())
	golden.Check(t, filepath.Join("testdata", "overlay_workloadips.golden"), out.String(), *updateGolden)
}
