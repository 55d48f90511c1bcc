package felix

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
)

// The second node of the tests that cross nodes: node-b, linked to the
// external namespace (which routes between the two nodes and their
// pods) on 198.18.1.0/24; its pods are in 10.66.0.0/16.
const nodeBName = "node-b"

var (
	nodeBAddr  = netip.MustParseAddr("198.18.1.1")
	extBAddr   = netip.MustParseAddr("198.18.1.2")
	nodeBPods  = netip.MustParsePrefix("10.66.0.0/16")
	nodeAPods  = netip.MustParsePrefix("10.65.0.0/16")
	nodeANet   = netip.MustParsePrefix("198.18.0.0/24")
	nodeBNet   = netip.MustParsePrefix("198.18.1.0/24")
	extRouting = []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter"}
)

// nodeB is the second node: its namespace, felix and status files.
type nodeB struct {
	ns     nstest.NS
	run    *nsexec.Runner
	h      *netlink.Handle
	status string
}

// feeds fans the Services and slices out to every node's felix.
type feeds []*sliceFeed

func (fs feeds) lbService(ns, name string, s *calc.Service) {
	for _, f := range fs {
		f.lbService(ns, name, s)
	}
}

func (fs feeds) lbSlice(ns, name, svc string, ports []calc.ServicePort, eps ...calc.SliceEndpoint) {
	for _, f := range fs {
		f.lbSlice(ns, name, svc, ports, eps...)
	}
}

func (fs feeds) synced() {
	for _, f := range fs {
		f.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}
	}
}

// addNodeB makes node-b, links it through the external namespace (now a
// router with no reverse path filter: DSR replies reach the client from
// another node than the one it sent to), writes both Nodes and node-b's
// pool, and starts node-b's felix with feed.
func (c *cluster) addNodeB(feed *sliceFeed) *nodeB {
	t := c.t
	t.Helper()
	b := &nodeB{status: t.TempDir()}
	b.ns = nstest.New(t, c.prefix, "nodeb")
	b.run = nstest.Runner(t, b.ns)
	t.Cleanup(func() {
		if err := palbpf.RemoveAll("", b.run); err != nil {
			t.Error(err)
		}
	})
	b.h, _ = nstest.Handle(t, b.ns)
	if err := nstest.Sysctl(b.run, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range extRouting {
		v := map[bool]string{true: "1", false: "0"}[sc == "net/ipv4/ip_forward"]
		if err := nstest.Sysctl(c.extRun, sc, v); err != nil {
			t.Fatal(err)
		}
	}
	c.ext.MustRun(t, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth-ext", "netns", b.ns.Name)
	c.ext.MustRun(t, "ip", "addr", "add", extBAddr.String()+"/24", "dev", "eth1")
	c.ext.MustRun(t, "ip", "link", "set", "eth1", "up")
	c.ext.MustRun(t, "ip", "route", "add", nodeBPods.String(), "via", nodeBAddr.String())
	b.ns.MustRun(t, "ip", "addr", "add", nodeBAddr.String()+"/24", "dev", "eth-ext")
	b.ns.MustRun(t, "ip", "link", "set", "eth-ext", "up")
	b.ns.MustRun(t, "ip", "route", "add", nodeANet.String(), "via", extBAddr.String())
	b.ns.MustRun(t, "ip", "route", "add", nodeAPods.String(), "via", extBAddr.String())
	c.node.MustRun(t, "ip", "route", "add", nodeBNet.String(), "via", extAddr.String())
	c.node.MustRun(t, "ip", "route", "add", nodeBPods.String(), "via", extAddr.String())
	c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: %s}
spec: {bgp: {ipv4Address: %s/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: %s}
spec: {bgp: {ipv4Address: %s/24}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-b}
spec: {cidr: %s}
`, nodeName, nodeAddr, nodeBName, nodeBAddr, nodeBPods))
	ctx, cancel := context.WithCancel(c.ctx)
	cfg := c.felixConfigOf()
	cfg.NodeName, cfg.NetNS, cfg.StatusDir, cfg.EndpointSlices = nodeBName, b.ns.Path(), b.status, feed
	runFelix(t, ctx, cancel, cfg)
	return b
}

// addPodOnB plumbs a pod on node-b and waits for its felix to program it.
func (c *cluster) addPodOnB(b *nodeB, ns, name, ip string) *pod {
	t := c.t
	t.Helper()
	p := &pod{ns: ns, name: name, ip: netip.MustParseAddr(ip), iface: names.VethNameForWorkload(ns, name)}
	p.netns = nstest.New(t, c.prefix, "pod-"+name)
	p.run = nstest.Runner(t, p.netns)
	podH, podNS := nstest.Handle(t, p.netns)
	if err := nstest.Workload(b.h, podH, podNS, p.iface, p.ip); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	wep := &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(nodeBName, "k8s", name, "eth0"), Namespace: ns},
		Spec: v3.WorkloadEndpointSpec{
			Orchestrator: "k8s", Node: nodeBName, Pod: name, Endpoint: "eth0", InterfaceName: p.iface,
			IPNetworks: []string{ip + "/32"}, Profiles: []string{"kns." + ns},
		},
	}
	if _, err := c.store.Apply(c.ctx, wep); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.status, dataplane.StatusFileName(ns, wep.Name))
	c.waitFor("pod "+name+" programmed on node-b", func() bool { _, err := os.Stat(path); return err == nil })
	p.wep = wep
	return p
}

// tunnelForwarded is how many replies the node sent on from the node
// port tunnel (its device's forwarded counter).
func tunnelForwarded(t *testing.T, run *nsexec.Runner) uint64 {
	t.Helper()
	v, err := inspect.Open("", run)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	n, err := v.ReasonPackets(palbpf.TunnelDevice, palbpf.ReasonForwarded)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBPFNodePortTunnel: with two nodes, each with its felix (no
// kube-proxy), a node port on node-a whose only backend is a pod on
// node-b answers an external client: node-a sends the flow through the
// node port tunnel to node-b, which gives it to its pod with the client's
// address kept; the replies come back through node-a
// (bpfExternalServiceMode Tunnel, the default), or with DSR straight from
// node-b, but for clients in bpfDSROptoutCIDRs; node-b's own node port
// reaches its pod directly; a Service with externalTrafficPolicy Local
// does not answer on node-a, which has no endpoint of it.
func TestBPFNodePortTunnel(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	fa, fb := &sliceFeed{c: make(chan []calc.Update)}, &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = fa
	runFelix(t, c.ctx, c.cancel, cfg)
	b := c.addNodeB(fb)
	far := c.addPodOnB(b, "ns-a", "far", "10.66.0.5")
	nameServer(t, far.run, "far")
	fs := feeds{fa, fb}
	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "p"}, {Proto: "udp", Port: namePort, Name: "u"}}
	spec := func(nodePort uint16) []calc.ServiceSpecPort {
		return []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80, NodePort: nodePort}, {Name: "u", Proto: "udp", Port: 80, NodePort: nodePort}}
	}
	fs.lbService("ns-a", "far", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.30")}, Ports: spec(30090)})
	fs.lbSlice("ns-a", "far-1", "far", ports, readyOn("10.66.0.5", nodeBName))
	fs.lbService("ns-a", "local", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.31")},
		Ports: spec(30091), ExternalLocal: true})
	fs.lbSlice("ns-a", "local-1", "local", ports, readyOn("10.66.0.5", nodeBName))
	fs.synced()

	onA, onB := netip.AddrPortFrom(nodeAddr, 30090), netip.AddrPortFrom(nodeBAddr, 30090)
	waitAsk(t, c.extRun, "tcp", onA)
	check := func(t *testing.T, mode string, viaA bool) {
		t.Helper()
		for _, proto := range []string{"tcp", "udp"} {
			before := tunnelForwarded(t, c.nodeRun)
			got, seen, errs := spread(c.extRun, proto, onA, 20)
			if len(errs) > 0 || got["far"] != 20 {
				t.Errorf("%s, %s to node-a's node port: answers %v (errors %v), want far every time", mode, proto, got, errs)
			}
			if len(seen) != 1 || !seen[extAddr.String()] {
				t.Errorf("%s, %s: far saw sources %v, want the client's %s", mode, proto, seen, extAddr)
			}
			// A UDP datagram from a source port an earlier one used
			// keeps the earlier flow's way (the mode it began in):
			// two of twenty may.
			back := tunnelForwarded(t, c.nodeRun) - before
			if viaA && back < 18 {
				t.Errorf("%s, %s: node-a sent on %d replies from the tunnel, want every one (20)", mode, proto, back)
			}
			if !viaA && back > 2 {
				t.Errorf("%s, %s: node-a sent on %d replies from the tunnel, want none (straight from node-b)", mode, proto, back)
			}
		}
	}
	c.sub(t, "Tunnel", func(t *testing.T) { check(t, "Tunnel", true) })
	c.sub(t, "node-b's own node port", func(t *testing.T) {
		// The client reaches node-b from its address on node-b's link.
		got, seen, errs := spread(c.extRun, "tcp", onB, 10)
		if len(errs) > 0 || got["far"] != 10 || !seen[extBAddr.String()] || len(seen) != 1 {
			t.Errorf("to node-b's node port: answers %v, sources %v (errors %v)", got, seen, errs)
		}
	})
	c.sub(t, "externalTrafficPolicy Local", func(t *testing.T) {
		if _, _, err := askService(c.extRun, "tcp", netip.AddrPortFrom(nodeAddr, 30091)); err == nil {
			t.Errorf("eTP Local on node-a, endpoint on node-b only: answered, want dropped")
		}
		waitAsk(t, c.extRun, "tcp", netip.AddrPortFrom(nodeBAddr, 30091))
	})
	c.sub(t, "DSR", func(t *testing.T) {
		c.applyFelixConfig("  bpfExternalServiceMode: DSR\n")
		c.waitFor("DSR: replies straight from node-b", func() bool {
			before := tunnelForwarded(t, c.nodeRun)
			_, _, err := askService(c.extRun, "tcp", onA)
			return err == nil && tunnelForwarded(t, c.nodeRun) == before
		})
		check(t, "DSR", false)
		c.applyFelixConfig("  bpfExternalServiceMode: DSR\n  bpfDSROptoutCIDRs: [" + extAddr.String() + "/32]\n")
		time.Sleep(1500 * time.Millisecond)
		waitAsk(t, c.extRun, "tcp", onA)
		check(t, "DSR, the client opted out", true)
		c.applyFelixConfig("")
	})
}
