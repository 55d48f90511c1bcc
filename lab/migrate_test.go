package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// calicoNode is a lab node turned into a node of a Calico cluster: its
// Palisade calico-node stopped and its state removed (felix's iptables
// rules and IP sets, its BGP routes), and BIRD 1.6 running in its place
// with the configuration Calico's confd writes for a node of a full mesh,
// so that the node's routes are BIRD's (`proto bird`). Its pods, wired by
// the calico CNI plugin, keep their addresses, interfaces and workload
// routes. Calico's felix is not there: nothing filters its pods' traffic
// meanwhile (Palisade's felix, started by the switch, programs policy).
type calicoNode struct {
	l    *Lab
	n    Node
	bird Proc
	sock string
	ctl  string
}

// becomeCalico turns node into a Calico node whose BIRD announces blocks
// and peers as peers say (nil: a mesh with the other nodes).
func becomeCalico(t *testing.T, l *Lab, node string, blocks []netip.Prefix, peers []calicoPeer) *calicoNode {
	t.Helper()
	ctx := context.Background()
	n, _ := l.Node(node)
	if p, ok := l.Proc("calico-node/" + node); ok {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// What Palisade left: felix's chains, rules and sets, its BGP routes.
	var cmds [][]string
	for _, ipt := range []string{"iptables-nft", "ip6tables-nft"} {
		for _, table := range []string{"raw", "mangle", "nat", "filter"} {
			cmds = append(cmds, []string{"ip", "netns", "exec", n.NS, ipt, "-t", table, "-F"}, []string{"ip", "netns", "exec", n.NS, ipt, "-t", table, "-X"})
		}
	}
	cmds = append(cmds, []string{"ip", "netns", "exec", n.NS, "ipset", "destroy"},
		[]string{"ip", "-n", n.NS, "route", "flush", "proto", "201"})
	for _, argv := range cmds {
		if out, err := run(ctx, argv...); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	if peers == nil {
		for _, m := range l.Nodes() {
			if m.Name != node {
				peers = append(peers, calicoPeer{IP: m.IP, Kind: "Mesh"})
			}
		}
	}
	pool := netip.MustParsePrefix(l.Options().PoolCIDR)
	dir := l.path("calico-" + node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := dir + "/bird.cfg"
	if err := os.WriteFile(conf, []byte(calicoBirdConfig(n.IP, blocks, pool, peers)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, ctl, err := l.birdBinaries(RRBird1)
	if err != nil {
		t.Skip(err)
	}
	c := &calicoNode{l: l, n: n, sock: dir + "/bird.ctl", ctl: ctl}
	c.bird, err = start(n.NS, "bird/calico-"+node, dir+"/bird.log", []string{bin, "-f", "-c", conf, "-s", c.sock}, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.recordProc("bird/calico-"+node, c.bird); err != nil {
		t.Fatal(err)
	}
	// The Palisade nodes' sessions with the node must be new ones, with
	// BIRD, as in a cluster where it always ran Calico: a GoBGP peer keeps
	// what the peer's earlier capabilities said (the graceful restart N
	// bit, RFC 8538, which BIRD 1.6 does not send and Palisade does), and
	// would take BIRD's Cease for a restart.
	for _, m := range l.Nodes() {
		pid, err := l.AgentPID(m.Name)
		if m.Name == node || err != nil {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := l.waitAgent(ctx, m.Name, pid, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// birdc runs a BIRD client command on the Calico node.
func (c *calicoNode) birdc(args ...string) string {
	out, _ := run(context.Background(), append([]string{c.ctl, "-s", c.sock}, args...)...)
	return out
}

// waitPeered waits until the Calico node's BIRD has sessions Established
// (every Palisade node has its session with peer Established) and BIRD's
// routes to every other node's pods.
func (c *calicoNode) waitPeered(t *testing.T, pods []Pod, sessions int, peer netip.Addr) {
	t.Helper()
	ctx := context.Background()
	others := len(c.l.Nodes()) - 1
	deadline := time.Now().Add(90 * time.Second)
	for {
		up := strings.Count(c.birdc("show", "protocols"), "Established")
		palisade := 0
		for _, m := range c.l.Nodes() {
			if m.Name == c.n.Name {
				continue
			}
			ss, _ := c.l.Sessions(ctx, m.Name)
			for _, s := range ss {
				if s.Peer == peer && s.Established() {
					palisade++
				}
			}
		}
		birdRoutes, _ := run(ctx, "ip", "-n", c.n.NS, "route", "show", "proto", "bird")
		missing := ""
		for _, p := range pods {
			if p.Node != c.n.Name && !strings.Contains(birdRoutes, netip.PrefixFrom(p.IP, 26).Masked().String()+" via") {
				missing = p.Key()
			}
		}
		if up == sessions && palisade == others && missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Calico node %s: BIRD has %d of %d sessions, the Palisade nodes %d with %s; no BIRD route to %q:\n%s\n%s\n%s",
				c.n.Name, up, sessions, palisade, peer, missing, c.birdc("show", "protocols", "all"), birdRoutes, tail(c.bird.Log, 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// flowSet is UDP flows between pods, started together.
type flowSet []flow

// stop stops every flow and returns, per flow, the datagrams lost and
// sent.
func (fs flowSet) stop(t *testing.T) (lost, sent int) {
	t.Helper()
	for _, f := range fs {
		l, s := f.Stop()
		lost += len(l)
		sent += s
		gap := ""
		if len(l) > 0 {
			gap = fmt.Sprintf(" (datagrams %d…%d)", l[0], l[len(l)-1])
		}
		t.Logf("%s: lost %d of %d%s", f.name, len(l), s, gap)
	}
	return lost, sent
}

// flowsWith starts flows at rate a second from and to every pod of node,
// with one pod of each other node.
func flowsWith(t *testing.T, l *Lab, node string, pods []Pod, rate int) flowSet {
	t.Helper()
	var fs flowSet
	port := 7300
	for _, a := range pods {
		if a.Node != node {
			continue
		}
		for _, b := range pods {
			if b.Node == node {
				continue
			}
			fs = append(fs, startFlow(t, l, b, a, port, rate), startFlow(t, l, a, b, port+1, rate))
			port += 2
		}
	}
	return fs
}

// checkIPAM runs `calicoctl ipam check` and fails unless it finds no
// problem.
func checkIPAM(t *testing.T, l *Lab) {
	t.Helper()
	out, err := l.Calicoctl(context.Background(), "node1", nil, "ipam", "check")
	if err != nil || !strings.Contains(out, "found 0 problems") {
		t.Errorf("calicoctl ipam check: %v\n%s", err, out)
	}
}

// nodeBlocks are the blocks of a node's pods.
func nodeBlocks(pods []Pod, node string) []netip.Prefix {
	var blocks []netip.Prefix
	for _, p := range pods {
		if p.Node == node {
			blocks = append(blocks, netip.PrefixFrom(p.IP, 26).Masked())
		}
	}
	slices.SortFunc(blocks, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(blocks)
}

// pingAcross checks that every pod of node reaches every pod of the other
// nodes and back.
func pingAcross(t *testing.T, l *Lab, pods []Pod, node, why string) {
	t.Helper()
	for _, a := range pods {
		for _, b := range pods {
			if a.Node != b.Node && (a.Node == node || b.Node == node) {
				if _, err := l.Ping(context.Background(), a.Key(), b.IP, 20*time.Second); err != nil {
					t.Fatalf("%s: %s does not reach %s: %v", why, a.Key(), b.Key(), err)
				}
			}
		}
	}
}

// switchToPalisade stops the Calico node's BIRD with sig, as Calico's
// calico-node stops (SIGTERM: BIRD closes its sessions) or dies (SIGKILL:
// its peers keep its routes, graceful restart), and starts Palisade's
// calico-node on the node at once, while UDP flows run between the node's
// pods and the other nodes' pods, both ways. It waits until sessionsUp
// says every session is Established and every pod route is there, and
// returns the datagrams lost and sent. It then checks that the routes
// BIRD left were taken over and replaced: none is left as BIRD's.
func switchToPalisade(t *testing.T, cn *calicoNode, pods []Pod, sig syscall.Signal, sessionsUp func()) (lost, sent int) {
	t.Helper()
	l, ctx := cn.l, context.Background()
	flows := flowsWith(t, l, cn.n.Name, pods, 100)
	time.Sleep(time.Second)
	began := time.Now()
	if err := syscall.Kill(cn.bird.PID, sig); err != nil {
		t.Fatal(err)
	}
	if !cn.bird.wait(10 * time.Second) {
		t.Fatal("BIRD did not stop")
	}
	if err := l.startNode(ctx, cn.n); err != nil {
		t.Fatal(err)
	}
	sessionsUp()
	t.Logf("%s: BIRD %s, Palisade's calico-node started: every session Established after %s", cn.n.Name, sig, time.Since(began).Round(10*time.Millisecond))
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	lost, sent = flows.stop(t)
	t.Logf("%s switched with BIRD %s: %d of %d datagrams lost (%d flows of 100 a second)", cn.n.Name, sig, lost, sent, len(flows))

	deadline := time.Now().Add(70 * time.Second)
	for {
		out, _ := run(ctx, "ip", "-n", cn.n.NS, "route", "show", "proto", "bird")
		if strings.TrimSpace(out) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("routes left as BIRD's on %s:\n%s", cn.n.Name, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := tail(l.nodeDir(cn.n.Name, "calico-node.log"), 1<<20); !strings.Contains(out, "Took over the routes to IP pools another BGP daemon") {
		t.Errorf("%s's calico-node did not take BIRD's routes over:\n%s", cn.n.Name, tail(l.nodeDir(cn.n.Name, "calico-node.log"), 3000))
	}
	checkIPAM(t, l)
	return lost, sent
}

// migrateNode turns node into a Calico node whose BIRD peers with peers
// (nil: the full mesh), checks that it is part of the cluster (its
// sessions, its pods reached, IPAM), and switches it to Palisade with
// BIRD stopped by sig under flows (switchToPalisade), waiting for every
// session of the lab. After a SIGKILL no datagram may be lost: the peers
// kept the node's routes (graceful restart).
func migrateNode(t *testing.T, l *Lab, pods []Pod, node string, sig syscall.Signal, peers []calicoPeer, what string) {
	t.Helper()
	sessions := len(peers)
	if peers == nil {
		sessions = len(l.Nodes()) - 1
	}
	cn := becomeCalico(t, l, node, nodeBlocks(pods, node), peers)
	cn.waitPeered(t, pods, sessions, cn.n.IP)
	pingAcross(t, l, pods, node, node+" "+what)
	checkIPAM(t, l)
	lost, _ := switchToPalisade(t, cn, pods, sig, func() {
		if _, err := l.WaitSessions(context.Background(), 60*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	if sig == syscall.SIGKILL && lost > 0 {
		t.Errorf("%s: %d datagrams lost although its peers kept its routes (graceful restart)", node, lost)
	}
	requireReachable(t, l, node+" switched to Palisade")
}

// TestMigrateCalicoNode: nodes of a Calico cluster (BIRD 1.6 configured
// as Calico's confd writes a full mesh, their routes `proto bird`, their
// pods wired by the calico CNI plugin) meshed with Palisade nodes are
// switched to Palisade's calico-node while UDP flows run between their
// pods and the other nodes' pods: node3 with Calico's calico-node stopped
// (BIRD gets SIGTERM and closes its sessions), then node2 with it killed
// (SIGKILL), which must lose nothing (graceful restart). Every datagram
// lost is reported; after each switch every session is Established, the
// routes BIRD left were taken over and replaced, `calicoctl ipam check`
// finds no problem and every pod reaches every other.
func TestMigrateCalicoNode(t *testing.T) {
	beside(t, &otherLane)
	if findBird1(binDir) == "" {
		t.Skip("BIRD 1.6 is not unpacked in .tools/bird1 (make deps)")
	}
	l := newLab(t, Options{Nodes: 3, Peering: PeeringMesh})
	pods := addPods(t, l, "mig", 1)
	requireReachable(t, l, "all Palisade")
	for _, c := range []struct {
		node string
		sig  syscall.Signal
	}{{"node3", syscall.SIGTERM}, {"node2", syscall.SIGKILL}} {
		migrateNode(t, l, pods, c.node, c.sig, nil, "a Calico node")
	}
}

// calicoRRAddr is the fabric address of the Calico route reflector of
// TestMigrateUnderCalicoReflector, and calicoClusterID its cluster ID.
var calicoRRAddr = netip.MustParseAddr("198.18.0.241")

const calicoClusterID = "224.0.0.1"

// waitOnlyReflector waits until every Palisade node has exactly one
// session, with the reflector, Established.
func waitOnlyReflector(t *testing.T, l *Lab, skip string, rr netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		bad := ""
		for _, n := range l.Nodes() {
			if n.Name == skip {
				continue
			}
			ss, err := l.Sessions(context.Background(), n.Name)
			if err != nil || len(ss) != 1 || ss[0].Peer != rr || !ss[0].Established() {
				bad = fmt.Sprintf("%s: %v %v", n.Name, ss, err)
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions with the reflector %s only: %s", rr, bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMigrateUnderCalicoReflector: a Calico node, BIRD 1.6 configured as
// Calico's confd writes a route reflector (its Node has a cluster ID, a
// BGPPeer peers every node with it, the mesh is off), reflects for
// Palisade nodes: every client's session with it comes up, each learns the
// others' blocks with their own next hops, and pods reach each other.
// Calico clients of the reflector (BIRD 1.6 with a Node_ peer) are switched
// to Palisade's calico-node while UDP flows run between their pods and the
// other nodes': node3 with its BIRD stopped (SIGTERM; the datagrams lost
// are reported), node2 with it killed (SIGKILL), which must lose none.
// Then a Palisade client's calico-node is stopped and started again under
// the same flows and loses none either: the Calico reflector keeps its
// routes (graceful restart).
func TestMigrateUnderCalicoReflector(t *testing.T) {
	beside(t, &otherLane)
	if findBird1(binDir) == "" {
		t.Skip("BIRD 1.6 is not unpacked in .tools/bird1 (make deps)")
	}
	l := newLab(t, Options{Nodes: 3, Peering: PeeringMesh})
	ctx := context.Background()
	pods := addPods(t, l, "rrmig", 1)
	requireReachable(t, l, "all Palisade, meshed")

	// The Calico route reflector.
	ns, err := l.attachNS(ctx, "calico-rr", "calico-rr", calicoRRAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(ctx, fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: calico-rr, labels: {route-reflector: "true"}}
spec: {bgp: {ipv4Address: %s/24, routeReflectorClusterID: %s}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: peer-with-route-reflectors}
spec: {nodeSelector: all(), peerSelector: "route-reflector == 'true'"}
---
`, calicoRRAddr, calicoClusterID)+bgpConfigYAML(false)); err != nil {
		t.Fatal(err)
	}
	var clients []calicoPeer
	for _, n := range l.Nodes() {
		clients = append(clients, calicoPeer{IP: n.IP, Kind: "Node", ClusterID: calicoClusterID})
	}
	dir := l.path("calico-rr")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := dir + "/bird.cfg"
	if err := os.WriteFile(conf, []byte(calicoBirdConfig(calicoRRAddr, nil, netip.MustParsePrefix(l.Options().PoolCIDR), clients)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, ctl, err := l.birdBinaries(RRBird1)
	if err != nil {
		t.Skip(err)
	}
	rr := &calicoNode{l: l, n: Node{Name: "calico-rr", NS: ns, IP: calicoRRAddr}, sock: dir + "/bird.ctl", ctl: ctl}
	rr.bird, err = start(ns, "bird/calico-rr", dir+"/bird.log", []string{bin, "-f", "-c", conf, "-s", rr.sock}, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.recordProc("bird/calico-rr", rr.bird); err != nil {
		t.Fatal(err)
	}
	waitOnlyReflector(t, l, "", calicoRRAddr)
	requireReachable(t, l, "Palisade clients of a Calico route reflector")

	for _, c := range []struct {
		node string
		sig  syscall.Signal
	}{{"node3", syscall.SIGTERM}, {"node2", syscall.SIGKILL}} {
		cn := becomeCalico(t, l, c.node, nodeBlocks(pods, c.node), []calicoPeer{{IP: calicoRRAddr, Kind: "Node"}})
		cn.waitPeered(t, pods, 1, calicoRRAddr)
		pingAcross(t, l, pods, c.node, c.node+" a Calico client of the reflector")
		lost, _ := switchToPalisade(t, cn, pods, c.sig, func() { waitOnlyReflector(t, l, "", calicoRRAddr) })
		if c.sig == syscall.SIGKILL && lost > 0 {
			t.Errorf("%s: %d datagrams lost although the reflector kept its routes (graceful restart)", c.node, lost)
		}
		requireReachable(t, l, c.node+" switched, under the Calico reflector")
	}

	// A Palisade client stops and starts again: the Calico reflector keeps
	// its routes meanwhile.
	flows := flowsWith(t, l, "node1", pods, 100)
	time.Sleep(time.Second)
	old, err := l.AgentPID("node1")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := l.waitAgent(ctx, "node1", old, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitOnlyReflector(t, l, "", calicoRRAddr)
	time.Sleep(2 * time.Second)
	if lost, sent := flows.stop(t); lost > 0 {
		t.Errorf("node1's calico-node restarted under the Calico reflector: %d of %d datagrams lost", lost, sent)
	}
	if out := rr.birdc("show", "protocols"); strings.Count(out, "Established") != 3 {
		t.Errorf("the reflector's sessions:\n%s", out)
	}
}

// TestMigrateCalicoReflectorNodes: the route reflectors of a Calico
// cluster are nodes (node1 and node2: a cluster ID and the label in their
// Node, a BGPPeer peering every node with them, the mesh off), and are
// switched to Palisade last. Each in turn runs BIRD 1.6 configured as
// Calico's confd writes a reflector node (its blocks, a plain session with
// the other reflector, `rr client` toward node3) and is switched to
// Palisade's calico-node under UDP flows between its pods and the other
// nodes': node1 with its BIRD stopped (SIGTERM; the datagrams lost are
// reported), node2 with it killed (SIGKILL), which must lose none. After
// each switch every session is Established, BIRD's routes were taken
// over, `calicoctl ipam check` finds no problem and every pod reaches
// every other.
func TestMigrateCalicoReflectorNodes(t *testing.T) {
	beside(t, &otherLane)
	if findBird1(binDir) == "" {
		t.Skip("BIRD 1.6 is not unpacked in .tools/bird1 (make deps)")
	}
	l := newLab(t, Options{Nodes: 3, Peering: PeeringNodeRR, Etcd: EtcdExternal}) // node1 stops: not its embedded etcd
	pods := addPods(t, l, "rrnode", 1)
	requireReachable(t, l, "all Palisade, node1 and node2 reflecting")
	isRR := map[string]bool{}
	for _, n := range nodeRRs(l.Nodes()) {
		isRR[n.Name] = true
	}
	for _, c := range []struct {
		node string
		sig  syscall.Signal
	}{{"node1", syscall.SIGTERM}, {"node2", syscall.SIGKILL}} {
		var peers []calicoPeer
		for _, m := range l.Nodes() {
			switch {
			case m.Name == c.node:
			case isRR[m.Name]:
				peers = append(peers, calicoPeer{IP: m.IP, Kind: "Node"})
			default:
				peers = append(peers, calicoPeer{IP: m.IP, Kind: "Node", ClusterID: nodeRRClusterID})
			}
		}
		migrateNode(t, l, pods, c.node, c.sig, peers, "a Calico reflector node")
	}
}
