package bgp_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// svcCIDR is the service range every node of rrFabric advertises.
var svcCIDR = netip.MustParsePrefix("10.96.0.0/12")

// rrFabric is an in-cluster route reflector rr1 (198.18.0.11) with the
// Palisade nodes n1, n2 (lower addresses than the reflector's) and n3
// (higher) and a BIRD speaker (198.18.0.250, a BGPPeer of rr1's, with a
// password) as clients: a reflector's plain client sessions, held by its
// fast path (node/bgp/reflector). restart is the peering BGPPeer's
// maxRestartTime.
func rrFabric(t *testing.T, restart time.Duration) (*fabric, *birdPeer, map[string]netip.Prefix, map[string]string) {
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off,
		ServiceClusterIPs: []v3.ServiceClusterIPBlock{{CIDR: svcCIDR.String()}}}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()",
		PeerSelector: "has(routeReflector)", MaxRestartTime: &v3.Duration{Duration: restart}}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "bird"}, Spec: v3.BGPPeerSpec{Node: "rr1", PeerIP: "198.18.0.250", ASNumber: 64512,
		Password: &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp-secrets", Key: "bird"}}}})
	secrets := t.TempDir()
	writeSecret(t, secrets, "bgp-secrets", "bird", "s3cret")
	b := f.startBird("bird", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol static { ipv4; route 198.19.100.0/24 blackhole; }
protocol bgp rr1 { local 198.18.0.250 as 64512; neighbor 198.18.0.11 as 64512; password "s3cret"; graceful restart;
  ipv4 { import all; export where source = RTS_STATIC; }; }
`)
	addrs := map[string]string{"rr1": "198.18.0.11", "n1": "198.18.0.1", "n2": "198.18.0.2", "n3": "198.18.0.20"}
	f.node("rr1", addrs["rr1"]+"/24", func(n *v3.Node) {
		n.Labels = map[string]string{"routeReflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	})
	blocks := map[string]netip.Prefix{}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.node(n, addrs[n]+"/24", nil)
	}
	for _, n := range []string{"rr1", "n1", "n2", "n3"} {
		blocks[n] = f.block(n)
		f.start(n, "-secrets", secrets)
	}
	return f, b, blocks, addrs
}

// TestReflectorFastPath: every client gets every other client's block
// and BIRD's route, next hops unchanged; BIRD gets the nodes' blocks
// reflected (ORIGINATOR_ID, CLUSTER_LIST) over a TCP MD5 session the
// reflector opened. The reflector has every node's path of the service
// range they all advertise (for its kernel's ECMP). The gobgp CLI on the reflector shows the client
// sessions and their tables as before the fast path, and not the fast
// path's own sessions with GoBGP. A BGPFilter on the clients' sessions
// moves them to GoBGP (which applies it) and its removal moves them
// back, the routes staying throughout.
func TestReflectorFastPath(t *testing.T) {
	t.Parallel()
	f, b, blocks, addrs := rrFabric(t, 120*time.Second)
	ext := netip.MustParsePrefix("198.19.100.0/24")
	routed := func() {
		t.Helper()
		for _, n := range []string{"n1", "n2", "n3"} {
			for _, o := range []string{"n1", "n2", "n3", "rr1"} {
				if o != n {
					f.waitRoute(f.ns[n], blocks[o], addrs[o])
				}
			}
			f.waitRoute(f.ns[n], ext, "198.18.0.250")
		}
	}
	routed()
	for _, n := range []string{"n1", "n2", "n3"} {
		eventually(t, 10*time.Second, "BIRD has "+n+"'s block reflected", func() (bool, string) {
			out := b.show("show", "route", "for", blocks[n].String(), "all")
			return strings.Contains(out, "BGP.next_hop: "+addrs[n]) && strings.Contains(out, "BGP.originator_id: "+addrs[n]) &&
				strings.Contains(out, "BGP.cluster_list: 224.0.0.1"), out
		})
	}

	// The gobgp CLI's view on the reflector.
	var ns []struct {
		Conf struct {
			Address string `json:"neighbor_address"`
		} `json:"conf"`
		State struct {
			Session int `json:"session_state"`
		} `json:"state"`
	}
	if err := f.gobgpJSON("rr1", &ns, "neighbor"); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, n := range ns {
		if n.State.Session != 6 { // ESTABLISHED
			t.Errorf("gobgp neighbor on rr1: %s in state %d, want Established", n.Conf.Address, n.State.Session)
		}
		listed = append(listed, n.Conf.Address)
	}
	slices.Sort(listed)
	if want := []string{"198.18.0.1", "198.18.0.2", "198.18.0.20", "198.18.0.250"}; !slices.Equal(listed, want) {
		t.Errorf("gobgp neighbor on rr1 lists %v, want the clients %v", listed, want)
	}
	ps, err := f.paths("rr1", blocks["n2"])
	if err != nil || len(ps) != 1 || ps[0].Source != addrs["n2"] {
		t.Errorf("gobgp global rib on rr1 for n2's block: %+v (%v), want one path from %s", ps, err, addrs["n2"])
	}
	eventually(t, 10*time.Second, "rr1 holding every client's path of the service range", func() (bool, string) {
		ps, err := f.paths("rr1", svcCIDR)
		if err != nil {
			return false, err.Error()
		}
		var from []string
		for _, p := range ps {
			from = append(from, p.Source)
		}
		slices.Sort(from)
		return slices.Equal(from, []string{"", addrs["n1"], addrs["n2"], addrs["n3"]}) ||
			slices.Equal(from, []string{"<nil>", addrs["n1"], addrs["n2"], addrs["n3"]}), fmt.Sprint(from)
	})
	out, err := f.gobgpRaw("rr1", "neighbor", addrs["n1"], "adj-out")
	if err != nil || !strings.Contains(out, blocks["n2"].String()) || strings.Contains(out, blocks["n1"].String()) {
		t.Errorf("gobgp neighbor %s adj-out on rr1 should hold n2's block and not n1's own: %s (%v)", addrs["n1"], out, err)
	}
	out, err = f.gobgpRaw("rr1", "neighbor", "198.18.0.250", "adj-in")
	if err != nil || !strings.Contains(out, ext.String()) {
		t.Errorf("gobgp neighbor 198.18.0.250 adj-in on rr1 should hold BIRD's %s: %s (%v)", ext, out, err)
	}

	// A BGPFilter on the peering BGPPeer: the sessions move to GoBGP.
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "all"}, Spec: v3.BGPFilterSpec{
		ImportV4: []v3.BGPFilterRuleV4{{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "10.244.0.0/16"}}}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()",
		PeerSelector: "has(routeReflector)", Filters: []string{"all"}}})
	eventually(t, 20*time.Second, "rr1's client sessions moved to GoBGP", func() (bool, string) {
		log := f.log("rr1")
		return strings.Count(log, "from the fast path to GoBGP") >= 3, log
	})
	routed()
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(routeReflector)"}})
	eventually(t, 20*time.Second, "rr1's client sessions back on the fast path", func() (bool, string) {
		log := f.log("rr1")
		return strings.Count(log, "from GoBGP to the fast path") >= 3, log
	})
	routed()
}

// TestReflectorFastPathRestart: a client killed with -9 keeps its block
// on the other clients for its restart time (graceful restart), then
// marked LLGR_STALE for as long again (long-lived graceful restart,
// between nodes), then loses it; restarted, it has it again.
func TestReflectorFastPathRestart(t *testing.T) {
	t.Parallel()
	f, _, blocks, addrs := rrFabric(t, 4*time.Second)
	f.waitRoute(f.ns["n1"], blocks["n2"], addrs["n2"])
	f.waitRoute(f.ns["n2"], blocks["n1"], addrs["n1"])
	time.Sleep(time.Second)
	f.kill("n2")
	killed := time.Now()
	stale := func() (bool, string) {
		ps, err := f.paths("n1", blocks["n2"])
		if err != nil {
			return false, err.Error()
		}
		b, _ := json.Marshal(ps)
		// LLGR_STALE, 65535:6.
		return len(ps) > 0 && strings.Contains(string(b), "4294901766"), string(b)
	}
	// Kept through the restart time.
	for time.Since(killed) < 3*time.Second {
		if out := f.ours(f.ns["n1"], blocks["n2"].String()); !strings.Contains(out, "via "+addrs["n2"]) {
			t.Fatalf("n1 lost n2's block %s %s after n2 was killed, within its restart time: %q", blocks["n2"], time.Since(killed), out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	eventually(t, 10*time.Second, "n2's block LLGR_STALE on n1", stale)
	f.waitRoute(f.ns["n1"], blocks["n2"], "")
	if gone := time.Since(killed); gone < 6*time.Second {
		t.Errorf("n2's block was withdrawn %s after the kill, before its restart and long-lived stale times (4 s each)", gone)
	}
	f.start("n2", "-secrets", t.TempDir())
	f.waitRoute(f.ns["n1"], blocks["n2"], addrs["n2"])
	f.waitRoute(f.ns["n2"], blocks["n1"], addrs["n1"])
}

// TestReflectorFastPathNoAS4: a client that does not announce 4-octet AS
// numbers (BIRD with `enable as4 off`) cannot take the fast path's shared
// messages; after its first attempt its session goes to GoBGP, with a
// warning naming it, and it exchanges routes with the reflector and its
// other clients as any client does.
func TestReflectorFastPathNoAS4(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()",
		PeerSelector: "has(routeReflector)"}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "bird"}, Spec: v3.BGPPeerSpec{Node: "rr1", PeerIP: "198.18.0.250", ASNumber: 64512}})
	b := f.startBird("bird", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol static { ipv4; route 198.19.100.0/24 blackhole; }
log stderr all;
protocol bgp rr1 { local 198.18.0.250 as 64512; neighbor 198.18.0.11 as 64512; enable as4 off; debug all;
  ipv4 { import all; export where source = RTS_STATIC; }; }
`)
	addrs := map[string]string{"rr1": "198.18.0.11", "n1": "198.18.0.1"}
	f.node("rr1", addrs["rr1"]+"/24", func(n *v3.Node) {
		n.Labels = map[string]string{"routeReflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	})
	f.node("n1", addrs["n1"]+"/24", nil)
	blocks := map[string]netip.Prefix{}
	for _, n := range []string{"rr1", "n1"} {
		blocks[n] = f.block(n)
		f.start(n)
	}
	ext := netip.MustParsePrefix("198.19.100.0/24")
	f.waitRoute(f.ns["n1"], ext, "198.18.0.250")
	f.waitRoute(f.ns["rr1"], ext, "198.18.0.250")
	for _, n := range []string{"rr1", "n1"} {
		eventually(t, 20*time.Second, "BIRD has "+n+"'s block", func() (bool, string) {
			out := b.show("show", "route", "for", blocks[n].String(), "all")
			return strings.Contains(out, "BGP.next_hop: "+addrs[n]), out
		})
	}
	log := f.log("rr1")
	handed := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "cannot serve this client") {
			handed++
			if !strings.Contains(l, "198.18.0.250") {
				handed += 100
			}
		}
	}
	if handed != 1 {
		t.Errorf("rr1's log should say once that the fast path handed 198.18.0.250 (and nothing else) to GoBGP:\n%s", log)
	}
	// n1's session stays on the fast path: its routes come reflected.
	ps, err := f.paths("n1", ext)
	if err != nil || len(ps) != 1 {
		t.Errorf("n1's paths of BIRD's %s: %+v (%v), want one", ext, ps, err)
	}
}
