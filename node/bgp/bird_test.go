package bgp_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

const (
	bird2Bin = "/usr/sbin/bird"
	bird2Ctl = "/usr/sbin/birdc"
)

// bird1 returns BIRD 1.6's binaries (unpacked by hack/install-deps.sh).
func bird1(t testing.TB) (string, string) {
	root := "../../.tools/bird1/usr/sbin/"
	abs, _ := filepath.Abs(root)
	if _, err := os.Stat(filepath.Join(abs, "bird")); err != nil {
		t.Skip("BIRD 1.6 not unpacked in .tools/bird1 (hack/install-deps.sh)")
	}
	return filepath.Join(abs, "bird"), filepath.Join(abs, "birdc")
}

// birdPeer is a BIRD daemon in its own namespace.
type birdPeer struct {
	f    *fabric
	ns   string
	sock string
	ctl  string
}

// startBird runs BIRD with config conf in namespace name at addr.
func (f *fabric) startBird(name, addr, bin, ctl, conf string) *birdPeer {
	f.t.Helper()
	if _, err := os.Stat(bin); err != nil {
		f.t.Skipf("%s not installed", bin)
	}
	ns := f.addNS(name, addr)
	dir := f.t.TempDir()
	cf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		f.t.Fatal(err)
	}
	sock := filepath.Join(dir, "bird.ctl")
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "-f", "-c", cf, "-s", sock)
	logf, _ := os.Create(filepath.Join(dir, "bird.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if f.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			f.t.Logf("--- bird log:\n%s", b)
		}
	})
	return &birdPeer{f: f, ns: ns, sock: sock, ctl: ctl}
}

// show runs a birdc command.
func (b *birdPeer) show(args ...string) string {
	out, _ := exec.Command(b.ctl, append([]string{"-s", b.sock}, args...)...).CombinedOutput()
	return string(out)
}

// waitHas waits until BIRD has (or, with want false, lacks) a route.
func (b *birdPeer) waitHas(pfx netip.Prefix, want bool) {
	b.f.t.Helper()
	eventually(b.f.t, 30*time.Second, fmt.Sprintf("BIRD route %s present=%v", pfx, want), func() (bool, string) {
		out := b.show("show", "route", "for", pfx.String())
		return strings.Contains(out, pfx.String()) == want, out + b.show("show", "protocols")
	})
}

// established reports whether BIRD's protocol proto is Established.
func (b *birdPeer) established(proto string) bool {
	return strings.Contains(b.show("show", "protocols", proto), "Established")
}

// staysDown checks, for 3 s (several connect retries), that protocol proto
// never comes up and that BIRD never learns pfx over it; why says what
// is wrong with the session.
func (b *birdPeer) staysDown(proto string, pfx netip.Prefix, why string) {
	b.f.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if b.established(proto) {
			b.f.t.Fatalf("%s's session came up %s:\n%s", proto, why, b.show("show", "protocols", "all", proto))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := b.show("show", "route", "for", pfx.String()); strings.Contains(out, pfx.String()) {
		b.f.t.Fatalf("BIRD learned %s's %s over a session %s:\n%s", proto, pfx, why, out)
	}
}

// rrConf renders a BIRD route reflector config for the nodes.
func rrConf(bird1 bool, nodes map[string]string) string {
	var sb strings.Builder
	sb.WriteString("router id 198.18.0.250;\nprotocol device { }\n")
	if bird1 {
		sb.WriteString("protocol direct { interface \"eth0\"; }\n")
		sb.WriteString("template bgp nodes { local 198.18.0.250 as 64512; rr client; rr cluster id 198.18.0.250; graceful restart; import all; export all; }\n")
	} else {
		sb.WriteString("protocol direct { ipv4; interface \"eth0\"; }\n")
		sb.WriteString("template bgp nodes { local 198.18.0.250 as 64512; rr client; rr cluster id 198.18.0.250; graceful restart; ipv4 { import all; export all; }; }\n")
	}
	for name, addr := range nodes {
		fmt.Fprintf(&sb, "protocol bgp %s from nodes { neighbor %s as 64512; }\n", name, addr)
	}
	return sb.String()
}

// startRRClients creates and starts nodes n1 and n2 (at addrs), each
// with a block, and waits until the route reflector rr has both blocks.
func (f *fabric) startRRClients(rr *birdPeer, addrs map[string]string) map[string]netip.Prefix {
	f.t.Helper()
	blocks := map[string]netip.Prefix{}
	for _, n := range []string{"n1", "n2"} {
		f.node(n, addrs[n]+"/24", nil)
		blocks[n] = f.block(n)
		f.start(n)
	}
	rr.waitHas(blocks["n1"], true)
	rr.waitHas(blocks["n2"], true)
	return blocks
}

// TestBIRDRouteReflector: the seed's topology, mesh off, every node peering
// with a BIRD route reflector through a global BGPPeer; BIRD 2 and 1.6.
func TestBIRDRouteReflector(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"bird2", "bird1.6"} {
		t.Run(version, func(t *testing.T) {
			bin, ctl := bird2Bin, bird2Ctl
			if version == "bird1.6" {
				bin, ctl = bird1(t)
			}
			f := newFabric(t)
			f.pool()
			off := false
			f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
			f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512}})
			addrs := map[string]string{"n1": "198.18.0.1", "n2": "198.18.0.2"}
			rr := f.startBird("rr", "198.18.0.250/24", bin, ctl, rrConf(version == "bird1.6", addrs))
			blocks := f.startRRClients(rr, addrs)
			f.waitRoute(f.ns["n1"], blocks["n2"], addrs["n2"])
			f.waitRoute(f.ns["n2"], blocks["n1"], addrs["n1"])
		})
	}
}

// TestEBGP: the seed's eBGP example; node n1 (AS 65000) peers with the
// rack's BIRD in AS 65001. BIRD learns n1's block and n1 installs BIRD's
// route, but nothing learned from a peer goes on to another: BIRD never
// gets n2's block from n1, nor n2 BIRD's route. A BGPFilter on the
// BGPPeer that accepts the pool's routes from remote peers sends n2's
// block too (with n1 as next hop, or n2 with keepOriginalNextHop); one
// that rejects n1's own block withdraws it.
func TestEBGP(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{ASNumber: asn(65000)}})
	peer := &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "bgppeer-n1-zircon"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", Node: "n1", ASNumber: 65001}}
	f.apply(peer)
	ext := netip.MustParsePrefix("198.19.100.0/24")
	b := f.startBird("zircon", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol static { ipv4; route 198.19.100.0/24 blackhole; }
protocol bgp n1 {
  description "198.18.0.1";
  local 198.18.0.250 as 65001;
  neighbor 198.18.0.1 as 65000;
  graceful restart;
  ipv4 { import all; export all; };
}
`)
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	blk := f.block("n1")
	blk2 := f.block("n2")
	f.start("n1")
	f.start("n2")
	b.waitHas(blk, true)
	f.waitRoute(f.ns["n1"], ext, "198.18.0.250")
	f.waitRoute(f.ns["n1"], blk2, "198.18.0.2")
	// n1 knows n2's block and BIRD's route, and passes on neither.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if out := b.show("show", "route", "for", blk2.String()); strings.Contains(out, blk2.String()) {
			t.Fatalf("n1 re-advertised n2's block %s to its eBGP peer:\n%s", blk2, out)
		}
		if out := f.routes(f.ns["n2"], ext.String()); strings.Contains(out, "via") {
			t.Fatalf("n1 re-advertised BIRD's %s to n2: %s", ext, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Towards an eBGP peer n1 is the next hop of everything it sends.
	b.waitNextHop(blk, "198.18.0.1")

	// A BGPFilter that accepts the pool's routes from remote peers: n2's
	// block goes too, with n1 as next hop...
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "export-pods"}, Spec: v3.BGPFilterSpec{ExportV4: []v3.BGPFilterRuleV4{
		{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "10.244.0.0/16", Source: v3.BGPFilterSourceRemotePeers},
	}}})
	peer.Spec.Filters = []string{"export-pods"}
	f.apply(peer)
	b.waitNextHop(blk2, "198.18.0.1")
	// ...until the BGPPeer says keepOriginalNextHop: n2's block then goes
	// with n2's address (n1's own block still with n1's).
	peer.Spec.KeepOriginalNextHop = true
	f.apply(peer)
	b.waitNextHop(blk2, "198.18.0.2")
	b.waitNextHop(blk, "198.18.0.1")
	// A rule rejecting n1's own block, first: BIRD loses it, keeps n2's.
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "export-pods"}, Spec: v3.BGPFilterSpec{ExportV4: []v3.BGPFilterRuleV4{
		{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorEqual, CIDR: blk.String()},
		{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "10.244.0.0/16", Source: v3.BGPFilterSourceRemotePeers},
	}}})
	b.waitHas(blk, false)
	b.waitNextHop(blk2, "198.18.0.2")
}

// waitNextHop waits until BIRD's route to pfx goes via gw.
func (b *birdPeer) waitNextHop(pfx netip.Prefix, gw string) {
	b.f.t.Helper()
	eventually(b.f.t, 30*time.Second, fmt.Sprintf("BIRD route %s via %s", pfx, gw), func() (bool, string) {
		out := b.show("show", "route", "for", pfx.String(), "all")
		return strings.Contains(out, "via "+gw+" ") && strings.Contains(out, "BGP.next_hop: "+gw+"\n"), out
	})
}

// TestInClusterRR: mesh off, rr1 carries routeReflectorClusterID and the
// label routeReflector; a BGPPeer with peerSelector has(routeReflector)
// makes every node peer with it and it reflects between them.
func TestInClusterRR(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(routeReflector)"}})
	f.node("rr1", "198.18.0.11/24", func(n *v3.Node) {
		n.Labels = map[string]string{"routeReflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	})
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2, brr := f.block("n1"), f.block("n2"), f.block("rr1")
	for _, n := range []string{"rr1", "n1", "n2"} {
		f.start(n)
	}
	f.waitRoute(f.ns["n1"], b2, "198.18.0.2")
	f.waitRoute(f.ns["n2"], b1, "198.18.0.1")
	f.waitRoute(f.ns["n1"], brr, "198.18.0.11")
	f.waitRoute(f.ns["rr1"], b1, "198.18.0.1")
	// n1 and n2 have no session with each other.
	out, _ := exec.Command("ip", "netns", "exec", f.ns["n1"], "gobgp", "-p", "50051", "neighbor").CombinedOutput()
	if strings.Contains(string(out), "198.18.0.2 ") || !strings.Contains(string(out), "198.18.0.11") {
		t.Errorf("n1 should peer with the reflector only:\n%s", out)
	}
}

// TestNextHopSelf: TestInClusterRR with nextHopMode Self on the peering
// BGPPeer: the reflector is the next hop of the routes it reflects, so
// n2 routes n1's block through rr1; back to Auto, through n1 again.
func TestNextHopSelf(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	self := v3.NextHopSelf
	peer := &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(routeReflector)", NextHopMode: &self}}
	f.apply(peer)
	f.node("rr1", "198.18.0.11/24", func(n *v3.Node) {
		n.Labels = map[string]string{"routeReflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	})
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	for _, n := range []string{"rr1", "n1", "n2"} {
		f.start(n)
	}
	f.waitRoute(f.ns["n2"], b1, "198.18.0.11")
	f.waitRoute(f.ns["n1"], b2, "198.18.0.11")
	f.waitRoute(f.ns["rr1"], b1, "198.18.0.1")
	auto := v3.NextHopAuto
	peer.Spec.NextHopMode = &auto
	f.apply(peer)
	f.waitRoute(f.ns["n2"], b1, "198.18.0.1")
	f.waitRoute(f.ns["n1"], b2, "198.18.0.2")
}

// TestGracefulRestart: n1's BGP process is killed with -9 and restarted;
// BIRD keeps n1's block throughout, and n1's kernel keeps BIRD's route.
func TestGracefulRestart(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512}})
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol static { ipv4; route 198.19.100.0/24 via 198.18.0.250; }
protocol bgp n1 { local 198.18.0.250 as 64512; neighbor 198.18.0.1 as 64512; graceful restart; ipv4 { import all; export all; }; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	ext := netip.MustParsePrefix("198.19.100.0/24")
	f.start("n1")
	b.waitHas(blk, true)
	f.waitRoute(f.ns["n1"], ext, "198.18.0.250")
	time.Sleep(time.Second)

	f.kill("n1")
	check := func(phase string) {
		if out := b.show("show", "route", "for", blk.String()); !strings.Contains(out, blk.String()) {
			t.Fatalf("%s: BIRD withdrew %s:\n%s%s", phase, blk, out, b.show("show", "protocols", "all", "n1"))
		}
		if out := f.ours(f.ns["n1"], ext.String()); !strings.Contains(out, ext.String()) {
			t.Fatalf("%s: n1's kernel lost %s: %q", phase, ext, out)
		}
	}
	for i := 0; i < 15; i++ {
		check("while down")
		time.Sleep(200 * time.Millisecond)
	}
	f.start("n1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		check("restarting")
		out := b.show("show", "protocols", "n1")
		if strings.Contains(out, "Established") && !strings.Contains(b.show("show", "route", "for", blk.String(), "all"), "stale") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not re-established:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("after restart")
}

// TestLocalASNumber: a BGPPeer's localASNumber is the AS the node
// presents to that peer: BIRD, expecting AS 65050 from n1 (whose own AS is
// 64512), brings the session up and learns n1's block.
func TestLocalASNumber(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	local := numorstring.ASNumber(65050)
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 65001, LocalASNumber: &local}})
	b := f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol bgp n1 { local 198.18.0.250 as 65001; neighbor 198.18.0.1 as 65050; ipv4 { import all; export none; }; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	f.start("n1")
	b.waitHas(blk, true)
	if out := b.show("show", "route", "for", blk.String(), "all"); !strings.Contains(out, "BGP.as_path: 65050") {
		t.Errorf("n1's block should come from AS 65050:\n%s", out)
	}
}
