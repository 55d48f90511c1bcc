package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// checkPaths pings every pod from every other pod once more with the
// capture reset, then checks how each pair crossed the fabric: tunnelled
// (and never direct) unless direct(src node, dst node), then direct (and
// never tunnelled).
func checkPaths(t *testing.T, l *Lab, c *capture, why string, direct func(a, b Node) bool) {
	t.Helper()
	c.reset()
	m := l.Reachability(context.Background(), 5*time.Second)
	if m.Failures() > 0 {
		var b bytes.Buffer
		m.Print(&b)
		t.Fatalf("%s: pods unreachable:\n%s", why, b.String())
	}
	// The capture reads behind the probes: wait (bounded) until it has
	// seen every pair, however they crossed.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !c.seenAll(m.Pods) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, a := range m.Pods {
		for _, b := range m.Pods {
			if a.Node == b.Node {
				continue
			}
			na, _ := l.Node(a.Node)
			nb, _ := l.Node(b.Node)
			want := seenTunnelled
			if direct(na, nb) {
				want = seenDirect
			}
			if got := c.how(a.IP, b.IP); got != want {
				t.Errorf("%s: %s (%s) → %s (%s) seen as %s, want %s", why, a.Key(), a.Node, b.Key(), b.Node, seenWord(got), seenWord(want))
			}
		}
	}
	if c.other > 0 {
		t.Errorf("%s: %d VXLAN packets carried something other than pod traffic", why, c.other)
	}
}

func seenWord(h int) string {
	switch h {
	case 0:
		return "nothing"
	case seenTunnelled:
		return "tunnelled (UDP 4789)"
	case seenDirect:
		return "direct"
	}
	return "both tunnelled and direct"
}

func never(a, b Node) bool { return false }

// sameSubnet says whether two nodes share a subnet.
func sameSubnet(a, b Node) bool { return netip.PrefixFrom(a.IP, 24).Masked().Contains(b.IP) }

// podRunner runs probes in a pod's namespace.
func podRunner(t *testing.T, p Pod) *nsexec.Runner {
	t.Helper()
	r, err := nsexec.New(nsPath(p.NS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// checkNoBGP checks that no node runs BGP: nothing listens on port 179.
func checkNoBGP(t *testing.T, l *Lab) {
	t.Helper()
	for _, n := range l.Nodes() {
		out, err := l.Output(context.Background(), n.Name, nil, "ss", "-ltnH")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, ":179 ") {
			t.Errorf("%s listens for BGP with backend vxlan:\n%s", n.Name, out)
		}
	}
}

// podMTU is the MTU of a pod's eth0.
func podMTU(t *testing.T, l *Lab, p Pod) int {
	t.Helper()
	var mtu int
	err := l.InNamespace(p.Key(), func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err == nil {
			mtu = ifc.MTU
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mtu
}

// tcp6 connects from pod a to pod b's IPv6 address.
func tcp6(t *testing.T, l *Lab, a, b Pod) error {
	t.Helper()
	var ln net.Listener
	if err := l.InNamespace(b.Key(), func() (err error) {
		ln, err = net.Listen("tcp6", netip.AddrPortFrom(b.IP6, 7100).String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	var lastErr error
	for i := 0; i < 50; i++ {
		err := l.InNamespace(a.Key(), func() error {
			c, err := net.DialTimeout("tcp6", netip.AddrPortFrom(b.IP6, 7100).String(), 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("TCP over IPv6 %s → %s: %w", a.Key(), b.IP6, lastErr)
}

// peerSeen connects over TCP from one target to addr in another and
// returns the source address the server saw.
func peerSeen(t *testing.T, l *Lab, from, server string, addr netip.Addr) netip.Addr {
	t.Helper()
	var ln net.Listener
	if err := l.InNamespace(server, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 7300).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			c.Close()
		}
	}()
	if err := l.InNamespace(from, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, 7300).String(), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("TCP %s → %s: %v", from, addr, err)
	}
	select {
	case a := <-seen:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("the server at %s saw no connection from %s", addr, from)
	}
	return netip.Addr{}
}

// fdbHas says whether a node's VXLAN device forwards to addr.
func fdbHas(t *testing.T, l *Lab, node string, addr netip.Addr) bool {
	t.Helper()
	out, err := l.Output(context.Background(), node, nil, "bridge", "fdb", "show", "dev", "vxlan.calico")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(out, "dst "+addr.String()+" ")
}

// TestVXLANBackend runs the vxlan backend (no BGP at all) on nodes in two
// subnets behind a router, IPv4 and IPv6, pools vxlanMode Always: every
// pod reaches every other, every packet between nodes crosses the fabric
// as UDP 4789, pods get the host MTU less the VXLAN overhead and a
// 1,400-byte packet with DF set crosses; a node added joins the overlay
// and a node removed leaves it.
func TestVXLANBackend(t *testing.T) {
	l := newLab(t, Options{Nodes: 3, Subnets: 2, Backend: BackendVXLAN, IPv6: true})
	checkNoBGP(t, l)
	c := startCapture(t, l)
	pods := addPods(t, l, "default", 1)
	requireReachable(t, l, "vxlan backend, Always")
	checkPaths(t, l, c, "Always", never)

	for _, p := range pods {
		// IPv6 VXLAN takes 70 bytes of the 1500: 1430, for both families.
		if got := podMTU(t, l, p); got != 1430 {
			t.Errorf("pod %s has MTU %d, want 1430", p.Key(), got)
		}
		if b, _ := os.ReadFile(l.MTUFile(p.Node)); strings.TrimSpace(string(b)) != "1430" {
			t.Errorf("%s's MTU file holds %q, want 1430", p.Node, b)
		}
	}
	// node1 (198.18.0.0/24) to node2 (198.18.1.0/24), through the router.
	if err := nstest.PingDF(podRunner(t, pods[0]), pods[1].IP, 1400, 2*time.Second); err != nil {
		t.Fatalf("1,400 bytes with DF from %s to %s: %v", pods[0].Key(), pods[1].Key(), err)
	}
	for _, pair := range [][2]Pod{{pods[0], pods[1]}, {pods[1], pods[2]}, {pods[2], pods[0]}} {
		if err := tcp6(t, l, pair[0], pair[1]); err != nil {
			t.Error(err)
		}
	}
	// natOutgoing unchanged: across the overlay a pod keeps its address;
	// to an address outside the pools (the router) it is masqueraded to
	// its node's.
	if got := peerSeen(t, l, pods[0].Key(), pods[1].Key(), pods[1].IP); got != pods[0].IP {
		t.Errorf("%s seen from %s across the overlay, want its own address %s", pods[0].Key(), got, pods[0].IP)
	}
	n1, _ := l.Node(pods[0].Node)
	if got := peerSeen(t, l, pods[0].Key(), "router", routerAddrs[0]); got != n1.IP {
		t.Errorf("%s seen from %s by the router, want its node's address %s (natOutgoing)", pods[0].Key(), got, n1.IP)
	}
	// The capture reads behind the probes.
	waitFor(t, 5*time.Second, "the capture saw the IPv6 probe", func() (bool, string) { return c.how(pods[0].IP6, pods[1].IP6) != 0, "" })
	if c.how(pods[0].IP6, pods[1].IP6) != seenTunnelled {
		t.Errorf("IPv6 %s → %s seen as %s, want tunnelled", pods[0].IP6, pods[1].IP6, seenWord(c.how(pods[0].IP6, pods[1].IP6)))
	}

	ctx := context.Background()
	n4, err := l.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddPod(ctx, n4.Name, "default", "p4a"); err != nil {
		t.Fatal(err)
	}
	requireReachable(t, l, "node4 added")
	checkPaths(t, l, c, "node4 added", never)
	if !fdbHas(t, l, "node1", n4.IP) {
		t.Fatal("node1 has no FDB entry for node4")
	}
	out, err := l.Calicoctl(ctx, "node1", nil, "get", "node", n4.Name, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tun4 string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ipv4VXLANTunnelAddr:"); ok {
			tun4 = strings.TrimSpace(v)
		}
	}
	if tun4 == "" {
		t.Fatalf("node4 has no VXLAN tunnel address:\n%s", out)
	}
	if err := l.RemoveNode(ctx, n4.Name); err != nil {
		t.Fatal(err)
	}
	// Its tunnel address went back to the pool with it.
	if out, err := l.Calicoctl(ctx, "node1", nil, "ipam", "show", "--ip="+tun4); err != nil || !strings.Contains(out, "is not currently assigned") {
		t.Errorf("node4's tunnel address %s after the node was removed: %s %v", tun4, out, err)
	}
	waitFor(t, 10*time.Second, "node1 forgets node4's VTEP", func() (bool, string) { return !fdbHas(t, l, "node1", n4.IP), "" })
	rs, err := l.OverlayRoutes(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		for _, v := range r.Via {
			if v == n4.IP {
				t.Errorf("node1 still routes %s to the removed node4", r.Prefix)
			}
		}
	}
	requireReachable(t, l, "node4 removed")
}

// TestVXLANCrossSubnet runs pools vxlanMode CrossSubnet on the vxlan
// backend: pods on nodes of one subnet talk directly, across the router
// through the tunnel; switching the pool at runtime to Always tunnels
// everything, to Never takes the tunnel addresses away (no BGP: nodes no
// longer reach each other's pods), and back to CrossSubnet restores it.
func TestVXLANCrossSubnet(t *testing.T) {
	l := newLab(t, Options{Nodes: 3, Subnets: 2, Backend: BackendVXLAN, VXLAN: VXLANCrossSubnet})
	c := startCapture(t, l)
	addPods(t, l, "default", 1)
	requireReachable(t, l, "CrossSubnet")
	checkPaths(t, l, c, "CrossSubnet", sameSubnet)

	ctx := context.Background()
	setMode := func(mode string) {
		t.Helper()
		if _, err := l.Calicoctl(ctx, "node1", nil, "patch", "ippool", "default-ipv4-ippool", "-p", `{"spec":{"vxlanMode":"`+mode+`"}}`); err != nil {
			t.Fatal(err)
		}
	}
	setMode("Always")
	waitFor(t, 10*time.Second, "every node tunnels to its own subnet's nodes after the switch to Always", func() (bool, string) {
		for _, n := range l.Nodes() {
			rs, err := l.OverlayRoutes(ctx, n.Name)
			if err != nil || len(rs) == 0 {
				return false, fmt.Sprint(n.Name, rs, err)
			}
			for _, m := range l.Nodes() {
				if routesVia(rs, m.IP) {
					return false, fmt.Sprintf("%s still routes directly to %s: %v", n.Name, m.Name, rs)
				}
			}
		}
		return true, ""
	})
	checkPaths(t, l, c, "switched to Always", never)

	setMode("Never")
	waitFor(t, 15*time.Second, "tunnel addresses released after the switch to Never", func() (bool, string) {
		out, err := l.Calicoctl(ctx, "node1", nil, "get", "nodes", "-o", "yaml")
		return err == nil && !strings.Contains(out, "ipv4VXLANTunnelAddr"), out
	})
	waitFor(t, 10*time.Second, "every node's VXLAN device and overlay routes gone", func() (bool, string) {
		for _, n := range l.Nodes() {
			if out, err := l.Output(ctx, n.Name, nil, "ip", "link", "show", "vxlan.calico"); err == nil {
				return false, n.Name + " still has vxlan.calico: " + out
			}
			rs, err := l.OverlayRoutes(ctx, n.Name)
			if err != nil {
				return false, err.Error()
			}
			for _, r := range rs {
				if len(r.Via) > 0 {
					return false, fmt.Sprintf("%s still routes %s via %v", n.Name, r.Prefix, r.Via)
				}
			}
		}
		return true, ""
	})
	if m := l.Reachability(ctx, 500*time.Millisecond); m.Failures() != len(m.Pods)*(len(m.Pods)-1) {
		t.Errorf("with vxlanMode Never and no BGP, %d pod pairs still reach each other", len(m.Pods)*(len(m.Pods)-1)-m.Failures())
	}

	setMode("CrossSubnet")
	requireReachable(t, l, "back to CrossSubnet")
	checkPaths(t, l, c, "back to CrossSubnet", sameSubnet)
}

// checkNoRouteFight checks that no node's BGP part tried to program a
// route felix's overlay holds.
func checkNoRouteFight(t *testing.T, l *Lab) {
	t.Helper()
	for _, n := range l.Nodes() {
		if b, _ := os.ReadFile(l.nodeDir(n.Name, "calico-node.log")); strings.Contains(string(b), "Route slot held by another protocol") {
			t.Errorf("%s's BGP part tried to program a route felix owns:\n%s", n.Name, tail(l.nodeDir(n.Name, "calico-node.log"), 2000))
		}
	}
}

// routesVia says whether any route goes via addr.
func routesVia(rs []BGPRoute, addr netip.Addr) bool {
	for _, r := range rs {
		for _, v := range r.Via {
			if v == addr {
				return true
			}
		}
	}
	return false
}

// TestVXLANWithBGP runs the bird backend (BGP mesh) with a vxlanMode
// Always pool, as Calico does: the blocks are still advertised over BGP,
// but no route learned for them is programmed (felix routes them, through
// the tunnel: every packet between nodes is UDP 4789).
func TestVXLANWithBGP(t *testing.T) {
	l := newLab(t, Options{Nodes: 3, Subnets: 2, VXLAN: VXLANAlways})
	c := startCapture(t, l)
	addPods(t, l, "default", 1)
	requireReachable(t, l, "bird backend, vxlanMode Always")
	checkPaths(t, l, c, "bird + Always", never)
	ctx := context.Background()
	pool := netip.MustParsePrefix(l.Options().PoolCIDR)
	for _, n := range l.Nodes() {
		rs, err := l.BGPRoutes(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if pool.Contains(r.Prefix.Addr()) && len(r.Via) > 0 {
				t.Errorf("%s programmed the learned BGP route %s via %v inside the VXLAN pool", n.Name, r.Prefix, r.Via)
			}
		}
	}
	checkNoRouteFight(t, l)
	// Every node still advertises its blocks: each peer's RIB has them,
	// with the owner as next hop.
	blocks, err := l.Calicoctl(ctx, "node1", nil, "ipam", "show", "--show-blocks")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes() {
		rib, err := l.Output(ctx, n.Name, nil, "gobgp", "global", "rib", "-a", "ipv4")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Pods() {
			owner, _ := l.Node(p.Node)
			if p.Node == n.Name {
				continue
			}
			blk := netip.PrefixFrom(p.IP, 26).Masked().String()
			if !strings.Contains(rib, blk) || !strings.Contains(rib, owner.IP.String()) {
				t.Errorf("%s did not learn %s (%s's block) over BGP:\n%s\n%s", n.Name, blk, p.Node, rib, blocks)
			}
		}
	}
}

// TestPolicyOverVXLAN runs the whole policy suite (seed scenarios, the
// Kubernetes e2e model's cases, dynamic changes; TCP, UDP and SCTP) on
// the vxlan backend across two subnets: traffic between nodes arrives on
// vxlan.calico and is policed as any other. The capture proves the
// probes between nodes went through the tunnel.
func TestPolicyOverVXLAN(t *testing.T) {
	beside(t, &otherLane)
	var c *capture
	testPolicyLab(t, Options{Nodes: 3, Subnets: 2, Backend: BackendVXLAN}, func(l *Lab) { c = startCapture(t, l) })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vxlan == 0 {
		t.Fatal("no VXLAN packet crossed the fabric")
	}
	for pair, how := range c.seen {
		if how&seenDirect != 0 {
			t.Errorf("%s → %s crossed the fabric unencapsulated", pair[0], pair[1])
		}
	}
}

// TestVXLANModeSwitchBGP switches a pool at runtime on the bird backend
// (one subnet): from Never (BGP routes, pods direct) to Always (felix's
// tunnel routes replace BGP's, every packet between nodes tunnelled) and
// back (BGP's routes return, the VXLAN devices and tunnel addresses go).
func TestVXLANModeSwitchBGP(t *testing.T) {
	l := newLab(t, Options{Nodes: 3})
	c := startCapture(t, l)
	addPods(t, l, "default", 1)
	requireReachable(t, l, "vxlanMode Never")
	checkPaths(t, l, c, "Never", func(a, b Node) bool { return true })
	ctx := context.Background()
	setMode := func(mode string) {
		t.Helper()
		if _, err := l.Calicoctl(ctx, "node1", nil, "patch", "ippool", "default-ipv4-ippool", "-p", `{"spec":{"vxlanMode":"`+mode+`"}}`); err != nil {
			t.Fatal(err)
		}
		l.st.Options.VXLAN = mode // WaitPodRoutes checks the overlay's routes now
	}
	setMode(VXLANAlways)
	requireReachable(t, l, "switched to Always")
	checkPaths(t, l, c, "switched to Always", never)
	for _, n := range l.Nodes() {
		rs, err := l.BGPRoutes(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if len(r.Via) > 0 {
				t.Errorf("%s kept the BGP route %s via %v after the pool became VXLAN", n.Name, r.Prefix, r.Via)
			}
		}
	}
	checkNoRouteFight(t, l)
	setMode(VXLANNever)
	requireReachable(t, l, "back to Never")
	checkPaths(t, l, c, "back to Never", func(a, b Node) bool { return true })
	waitFor(t, 15*time.Second, "VXLAN devices and tunnel addresses gone", func() (bool, string) {
		out, err := l.Calicoctl(ctx, "node1", nil, "get", "nodes", "-o", "yaml")
		if err != nil || strings.Contains(out, "ipv4VXLANTunnelAddr") {
			return false, out
		}
		for _, n := range l.Nodes() {
			if _, err := l.Output(ctx, n.Name, nil, "ip", "link", "show", "vxlan.calico"); err == nil {
				return false, n.Name + " still has vxlan.calico"
			}
		}
		return true, ""
	})
}
