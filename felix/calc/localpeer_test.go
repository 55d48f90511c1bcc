package calc

import (
	"net/netip"
	"slices"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestLocalBGPPeers: a local workload selected by the localWorkloadSelector
// of a BGPPeer that applies to this node (globally, by name or by node
// selector) gets the peering addresses of BGPConfiguration default, and
// loses them when the BGPPeer, the node's labels, the workload's labels
// or the configuration stop saying so; workloads of other nodes never do.
func TestLocalBGPPeers(t *testing.T) {
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	flush := func() {
		t.Helper()
		g.Flush()
		if len(rec.errs) > 0 {
			t.Fatalf("order violations: %v", rec.errs)
		}
	}
	red := wep("ns1", "red", testNode, "10.0.0.1", map[string]string{"color": "red"})
	blue := wep("ns1", "blue", testNode, "10.0.0.2", map[string]string{"color": "blue"})
	elsewhere := wep("ns1", "far", "other", "10.0.0.3", map[string]string{"color": "red"})
	cfg := &v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.BGPConfigurationSpec{LocalWorkloadPeeringIPV4: "169.254.0.179", LocalWorkloadPeeringIPV6: "fd12:3456:789a::1"}}
	peer := func(name string, mod func(*v3.BGPPeerSpec)) *v3.BGPPeer {
		p := &v3.BGPPeer{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPPeer}, ObjectMeta: v3.ObjectMeta{Name: name},
			Spec: v3.BGPPeerSpec{LocalWorkloadSelector: "color == 'red'", ASNumber: 65401}}
		if mod != nil {
			mod(&p.Spec)
		}
		return p
	}
	node := func(labels map[string]string) *v3.Node {
		return &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: testNode, Labels: labels}}
	}
	want := []netip.Prefix{netip.MustParsePrefix("169.254.0.179/32"), netip.MustParsePrefix("fd12:3456:789a::1/128")}
	check := func(what, ep, peerName string, addrs []netip.Prefix) {
		t.Helper()
		e := rec.endpoints[wid("ns1", ep)]
		if e == nil {
			t.Fatalf("%s: endpoint %s not sent", what, ep)
		}
		if e.LocalBGPPeer != peerName || !slices.Equal(e.PeeringAddrs, addrs) {
			t.Errorf("%s: %s peer %q addrs %v, want %q %v", what, ep, e.LocalBGPPeer, e.PeeringAddrs, peerName, addrs)
		}
	}
	g.OnUpdates([]Update{up(red), up(blue), up(elsewhere), up(cfg), up(node(map[string]string{"rack": "r1"}))})
	g.OnInSync()
	flush()
	check("no BGPPeer", "red", "", nil)

	g.OnUpdate(up(peer("global-red", nil)))
	flush()
	check("global peer", "red", "global-red", want)
	check("global peer", "blue", "", nil)
	if _, ok := rec.endpoints[wid("ns1", "far")]; ok {
		t.Error("a workload of another node was sent")
	}

	// A node-scoped peer for blue: by node selector, then by name.
	g.OnUpdate(up(peer("rack-blue", func(s *v3.BGPPeerSpec) { s.LocalWorkloadSelector, s.NodeSelector = "color == 'blue'", "rack == 'r1'" })))
	flush()
	check("node selector", "blue", "rack-blue", want)
	g.OnUpdate(up(node(map[string]string{"rack": "r2"})))
	flush()
	check("node relabelled", "blue", "", nil)
	g.OnUpdate(up(peer("rack-blue", func(s *v3.BGPPeerSpec) { s.LocalWorkloadSelector, s.Node = "color == 'blue'", testNode })))
	flush()
	check("by node name", "blue", "rack-blue", want)

	// Only IPv4 configured.
	cfg.Spec.LocalWorkloadPeeringIPV6 = ""
	g.OnUpdate(up(cfg))
	flush()
	check("IPv4 only", "red", "global-red", want[:1])

	// The workload relabelled, then the peer deleted.
	red.Labels = map[string]string{"color": "green"}
	g.OnUpdate(up(red))
	flush()
	check("relabelled", "red", "", nil)
	g.OnUpdate(del(peer("rack-blue", nil)))
	flush()
	check("peer deleted", "blue", "", nil)
}
