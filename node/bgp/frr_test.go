package bgp_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Debian's FRR (frr 8.4).
const frrDir = "/usr/lib/frr"

// frrPeer is FRR's zebra and bgpd in their own namespace.
type frrPeer struct {
	f   *fabric
	ns  string
	dir string
}

// startFRR runs zebra and bgpd with the bgpd configuration conf in a
// namespace name at addr. The daemons run as frr with every file in a
// temporary directory (vty sockets included), so nothing of the host's
// FRR is used.
func (f *fabric) startFRR(name, addr, conf string) *frrPeer {
	f.t.Helper()
	if _, err := os.Stat(filepath.Join(frrDir, "bgpd")); err != nil {
		f.t.Skip("FRR is not installed (hack/install-deps.sh)")
	}
	ns := f.addNS(name, addr)
	dir, err := os.MkdirTemp("", "plbgp-frr-")
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { os.RemoveAll(dir) })
	// The daemons drop to user frr: the directory must be theirs to use.
	if err := os.Chmod(dir, 0o777); err != nil {
		f.t.Fatal(err)
	}
	p := &frrPeer{f: f, ns: ns, dir: dir}
	for file, text := range map[string]string{"zebra.conf": "hostname " + name + "\n", "bgpd.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o666); err != nil {
			f.t.Fatal(err)
		}
	}
	p.daemon("zebra")
	eventually(f.t, 10*time.Second, "zebra's socket", func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "zserv.api"))
		return err == nil, fmt.Sprint(err)
	})
	p.daemon("bgpd")
	eventually(f.t, 10*time.Second, "bgpd answers vtysh", func() (bool, string) {
		out, err := p.vtysh("show bgp summary")
		return err == nil, out
	})
	return p
}

// daemon runs one FRR daemon in the peer's namespace until the test ends.
func (p *frrPeer) daemon(name string) {
	p.f.t.Helper()
	d := p.dir
	args := []string{"netns", "exec", p.ns, filepath.Join(frrDir, name), "-f", filepath.Join(d, name+".conf"),
		"-i", filepath.Join(d, name+".pid"), "-z", filepath.Join(d, "zserv.api"), "--vty_socket", d,
		"-u", "frr", "-g", "frr", "--log", "file:" + filepath.Join(d, name+".log")}
	cmd := exec.Command("ip", args...)
	out, _ := os.Create(filepath.Join(d, name+".out"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.f.t.Fatal(err)
	}
	p.f.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if p.f.t.Failed() {
			b, _ := os.ReadFile(filepath.Join(d, name+".log"))
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			p.f.t.Logf("--- FRR %s log (tail):\n%s", name, b)
		}
	})
}

// vtysh runs one vtysh command against the peer's daemons.
func (p *frrPeer) vtysh(cmd string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", p.ns, "vtysh", "--vty_socket", p.dir, "-c", cmd).CombinedOutput()
	return string(out), err
}

// neighbor returns FRR's view of one neighbour (show bgp neighbors json).
func (p *frrPeer) neighbor(addr string) map[string]any {
	out, err := p.vtysh("show bgp neighbors " + addr + " json")
	if err != nil {
		return nil
	}
	var m map[string]map[string]any
	if json.Unmarshal([]byte(out), &m) != nil {
		return nil
	}
	return m[addr]
}

// forwardingBit reports whether the neighbour at addr announced, in its
// graceful restart capability, that it kept its IPv4 unicast forwarding
// state (the F bit), as FRR saw it.
func (p *frrPeer) forwardingBit(addr string) bool {
	gr, _ := p.neighbor(addr)["gracefulRestartInfo"].(map[string]any)
	v4, _ := gr["ipv4Unicast"].(map[string]any)
	return v4["fBit"] == true
}

// established reports whether FRR's session with addr is Established.
func (p *frrPeer) established(addr string) bool {
	return p.neighbor(addr)["bgpState"] == "Established"
}

// waitHas waits until FRR's table has (or lacks) pfx.
func (p *frrPeer) waitHas(pfx netip.Prefix, want bool) {
	p.f.t.Helper()
	eventually(p.f.t, 30*time.Second, fmt.Sprintf("FRR route %s present=%v", pfx, want), func() (bool, string) {
		out, _ := p.vtysh("show ip bgp " + pfx.String())
		has := strings.Contains(out, "Paths: (") && !strings.Contains(out, "Paths: (0 available")
		s, _ := p.vtysh("show bgp summary")
		return has == want, out + s
	})
}

// hostOn puts the first address of a node's block on the node's
// loopback, as a pod would hold it, and returns it.
func (f *fabric) hostOn(node string, blk netip.Prefix) netip.Addr {
	f.t.Helper()
	a := blk.Addr().Next()
	f.lab.Run("ip", "-n", f.ns[node], "addr", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", "lo")
	return a
}

// restartAcross kills node's BGP process (-9) and starts it again while
// datagrams flow both ways between a and b (addresses in namespaces nsA
// and nsB), until the restarted node has swept its stale routes and its
// sessions with FRR's addresses peers are Established; not one may be
// lost.
func (f *fabric) restartAcross(node string, frr *frrPeer, peers []string, nsA string, a netip.Addr, nsB string, b netip.Addr, port int) {
	f.t.Helper()
	flows := []udpFlow{f.startUDP(nsA, a, nsB, b, port), f.startUDP(nsB, b, nsA, a, port+1)}
	time.Sleep(time.Second)
	f.kill(node)
	time.Sleep(time.Second)
	f.start(node)
	eventually(f.t, 30*time.Second, node+"'s sessions back with FRR and its stale routes swept", func() (bool, string) {
		ok := strings.Contains(f.log(node), "stale routes removed")
		var states []string
		for _, p := range peers {
			st := frr.neighbor(p)["bgpState"]
			ok = ok && st == "Established"
			states = append(states, fmt.Sprint(p, " ", st))
		}
		return ok, strings.Join(states, ", ")
	})
	time.Sleep(2 * time.Second)
	for _, fl := range flows {
		if lost, sent := fl.Stop(); len(lost) > 0 {
			f.t.Errorf("%s: lost %v… of %d datagrams across the restart of %s", fl.name, lost, sent, node)
		}
	}
}

// frrBorder is FRR as the rack's router in AS 65001: eBGP with the given
// nodes (AS 64512), announcing 198.19.50.0/24, with extra neighbour lines.
func frrBorder(nodes []string, gracefulRestart bool, extra string) string {
	var b strings.Builder
	b.WriteString("hostname border\nrouter bgp 65001\n bgp router-id 198.18.0.251\n no bgp ebgp-requires-policy\n no bgp network import-check\n")
	if gracefulRestart {
		b.WriteString(" bgp graceful-restart\n")
	}
	for _, n := range nodes {
		fmt.Fprintf(&b, " neighbor %s remote-as 64512\n neighbor %s timers connect 1\n", n, n)
	}
	b.WriteString(extra)
	b.WriteString(" address-family ipv4 unicast\n  network 198.19.50.0/24\n exit-address-family\n")
	return b.String()
}

// TestFRREBGP: FRR as the eBGP border router of n1 (n2 only meshes): FRR
// learns n1's block and not n2's (a node passes on nothing it learned),
// both nodes' kernels... n1 installs FRR's route, n2 does not get it. The
// FQDN capability FRR receives carries the machine's host name, not the
// node name.
func TestFRREBGP(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "border"}, Spec: v3.BGPPeerSpec{Node: "n1", PeerIP: "198.18.0.251", ASNumber: 65001}})
	frr := f.startFRR("border", "198.18.0.251/24", frrBorder([]string{"198.18.0.1"}, false, ""))
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	f.start("n1")
	f.start("n2")
	frr.waitHas(b1, true)
	ext := netip.MustParsePrefix("198.19.50.0/24")
	f.waitRoute(f.ns["n1"], ext, "198.18.0.251")
	f.waitRoute(f.ns["n1"], b2, "198.18.0.2")
	for i := 0; i < 10; i++ {
		if out, _ := frr.vtysh("show ip bgp " + b2.String()); strings.Contains(out, "Paths: (1") {
			t.Fatalf("n1 passed n2's block %s on to FRR:\n%s", b2, out)
		}
		if out := f.ours(f.ns["n2"], ext.String()); strings.TrimSpace(out) != "" {
			t.Fatalf("n1 passed FRR's %s on to n2: %s", ext, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	host, _ := os.Hostname()
	if got := frr.neighbor("198.18.0.1")["hostname"]; got != host {
		t.Errorf("FRR sees host name %v from n1, want the machine's %q (not the node name)", got, host)
	}
}

// TestFRRRouteReflector: the mesh off, FRR reflects between n1 and n2;
// across a restart of n1 no datagram between the two is lost.
func TestFRRRouteReflector(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512}})
	var conf strings.Builder
	conf.WriteString("hostname rr\nrouter bgp 64512\n bgp router-id 198.18.0.250\n bgp cluster-id 198.18.0.250\n")
	for _, n := range []string{"198.18.0.1", "198.18.0.2"} {
		fmt.Fprintf(&conf, " neighbor %s remote-as 64512\n neighbor %s timers connect 1\n", n, n)
	}
	conf.WriteString(" address-family ipv4 unicast\n")
	for _, n := range []string{"198.18.0.1", "198.18.0.2"} {
		fmt.Fprintf(&conf, "  neighbor %s route-reflector-client\n", n)
	}
	conf.WriteString(" exit-address-family\n")
	frr := f.startFRR("rr", "198.18.0.250/24", conf.String())
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	f.start("n1")
	f.start("n2")
	frr.waitHas(b1, true)
	frr.waitHas(b2, true)
	f.waitRoute(f.ns["n1"], b2, "198.18.0.2")
	f.waitRoute(f.ns["n2"], b1, "198.18.0.1")
	a1, a2 := f.hostOn("n1", b1), f.hostOn("n2", b2)
	f.restartAcross("n1", frr, []string{"198.18.0.1", "198.18.0.2"}, f.ns["n1"], a1, f.ns["n2"], a2, 7311)
}

// TestFRRPassword: TCP MD5 with FRR both ways: n1 connects to FRR, FRR
// connects to n2 (n2 cannot connect out); both sessions come up. Then n2
// may connect out again, and its session comes back after n2 restarts
// without a datagram lost.
func TestFRRPassword(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "border"}, Spec: v3.BGPPeerSpec{
		PeerIP: "198.18.0.251", ASNumber: 65001, Password: &v3.BGPPassword{Value: "Tr0ub4dor&3"},
	}})
	frr := f.startFRR("border", "198.18.0.251/24", frrBorder([]string{"198.18.0.1", "198.18.0.2"}, false,
		" neighbor 198.18.0.1 password Tr0ub4dor&3\n neighbor 198.18.0.2 password Tr0ub4dor&3\n"))
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	f.noDial("n2")
	f.start("n1")
	f.start("n2")
	frr.waitHas(b1, true)
	frr.waitHas(b2, true)
	for _, n := range []string{"198.18.0.1", "198.18.0.2"} {
		if !frr.established(n) {
			t.Errorf("FRR's session with %s is not Established: %v", n, frr.neighbor(n)["bgpState"])
		}
	}
	// Across a restart of n2, nothing between an address behind FRR and
	// one of n2's block is lost. n2 may dial again for it, as a node
	// always can outside this test: a session only FRR may open comes
	// back on FRR's schedule, and FRR backs off for tens of seconds after
	// a connection that failed while n2 was starting (seen under load),
	// longer than n2 keeps FRR's routes waiting for it.
	f.lab.Run("ip", "netns", "exec", f.ns["n2"], "iptables", "-D", "OUTPUT", "-p", "tcp", "--dport", "179", "--syn", "-j", "DROP")
	f.lab.Run("ip", "-n", frr.ns, "addr", "add", "198.19.50.1/32", "dev", "lo")
	f.waitRoute(f.ns["n2"], netip.MustParsePrefix("198.19.50.0/24"), "198.18.0.251")
	a2 := f.hostOn("n2", b2)
	eventually(t, 30*time.Second, "FRR installs n2's block", func() (bool, string) {
		out := f.routes(frr.ns, b2.String())
		return strings.Contains(out, "via 198.18.0.2"), out
	})
	f.restartAcross("n2", frr, []string{"198.18.0.2"}, frr.ns, netip.MustParseAddr("198.19.50.1"), f.ns["n2"], a2, 7321)
}

// TestFRRGracefulRestart: n1's BGP process is killed (-9) and started
// again while a UDP flow runs between an address behind FRR and one in
// n1's block, with FRR in its default graceful-restart helper mode (its
// capability lists no family) and with `bgp graceful-restart`. Not one
// datagram is lost: FRR keeps n1's block meanwhile, and n1 keeps FRR's
// route in its kernel until FRR's End-of-RIB (whatever FRR's capability
// lists). The restarted n1 announces that it kept its forwarding state
// (the F bit) for IPv4 unicast.
func TestFRRGracefulRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"helper", "graceful-restart"} {
		t.Run(mode, func(t *testing.T) {
			f := newFabric(t)
			f.pool()
			off := false
			f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
			f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "border"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.251", ASNumber: 65001}})
			frr := f.startFRR("border", "198.18.0.251/24", frrBorder([]string{"198.18.0.1"}, mode == "graceful-restart", ""))
			// The address behind FRR, in the prefix it announces.
			f.lab.Run("ip", "-n", frr.ns, "addr", "add", "198.19.50.1/32", "dev", "lo")
			f.node("n1", "198.18.0.1/24", nil)
			blk := f.block("n1")
			// An address of n1's block on n1 itself, the flow's other end.
			pod := f.hostOn("n1", blk)
			f.start("n1")
			frr.waitHas(blk, true)
			ext := netip.MustParsePrefix("198.19.50.0/24")
			f.waitRoute(f.ns["n1"], ext, "198.18.0.251")
			eventually(t, 30*time.Second, "FRR installs n1's block", func() (bool, string) {
				out := f.routes(frr.ns, blk.String())
				return strings.Contains(out, "via 198.18.0.1"), out
			})
			time.Sleep(time.Second)
			if frr.forwardingBit("198.18.0.1") {
				t.Errorf("n1, started afresh, claims it kept its forwarding state: %v", frr.neighbor("198.18.0.1")["gracefulRestartInfo"])
			}

			f.restartAcross("n1", frr, []string{"198.18.0.1"}, frr.ns, netip.MustParseAddr("198.19.50.1"), f.ns["n1"], pod, 7301)
			// The kernel routes went through the restart: FRR's route is
			// still there, and n1 said it kept its forwarding state.
			f.waitRoute(f.ns["n1"], ext, "198.18.0.251")
			if !frr.forwardingBit("198.18.0.1") {
				t.Errorf("the restarted n1 did not set the forwarding-state bit: %v", frr.neighbor("198.18.0.1")["gracefulRestartInfo"])
			}
		})
	}
}
