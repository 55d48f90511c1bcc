package felix

import (
	"net/netip"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// TestBPFNodePortOtherNode: a pod reaches the node port on another
// node's address (Kubernetes' "should have session affinity work for
// NodePort service": an exec pod on one node, the first node's address),
// with backends on both nodes, the pod's own node among them: every
// connection is answered, by both backends, which see the pod's own
// address; the pod's node translates the flow itself, as Calico's eBPF
// dataplane does (nothing comes back through the other node's tunnel);
// with sessionAffinity ClientIP every connection goes to one backend,
// whichever node it is on. A process of node-a's own namespace reaching
// the node port on either node's address is translated at connect time
// (as Calico's connect-time programs do). Both nodes run felix without
// kube-proxy.
func TestBPFNodePortOtherNode(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	cg := testCgroup(t, c.prefix)
	fa, fb := &sliceFeed{c: make(chan []calc.Update)}, &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = fa
	cfg.Environ = append(cfg.Environ, "FELIX_CGROUPV2PATH="+cg)
	runFelix(t, c.ctx, c.cancel, cfg)
	b := c.addNodeB(fb)
	// As Calico's manifests make the default pool: pods' traffic to
	// addresses outside the pools (the nodes') is masqueraded, so a flow
	// left to the other node would reach it from node-a's address.
	c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16, natOutgoing: true}
`)
	c.addPod("ns-a", "web", "10.65.0.1", map[string]string{"app": "web"}, "sa-w")
	c.addPod("ns-a", "client", "10.65.0.2", map[string]string{"app": "client"}, "sa-x")
	far := c.addPodOnB(b, "ns-a", "far", "10.66.0.5")
	nameServer(t, c.pods["web"].run, "web")
	nameServer(t, far.run, "far")
	client := c.pods["client"].run

	fs := feeds{fa, fb}
	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "p"}, {Proto: "udp", Port: namePort, Name: "u"}}
	spec := func(nodePort uint16) []calc.ServiceSpecPort {
		return []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80, NodePort: nodePort}, {Name: "u", Proto: "udp", Port: 80, NodePort: nodePort}}
	}
	both := []calc.SliceEndpoint{readyOn("10.65.0.1", nodeName), readyOn("10.66.0.5", nodeBName)}
	fs.lbService("ns-a", "np", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.40")}, Ports: spec(30100)})
	fs.lbSlice("ns-a", "np-1", "np", ports, both...)
	fs.lbService("ns-a", "sticky", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.41")},
		Ports: spec(30101), AffinitySeconds: calc.DefaultAffinitySeconds})
	fs.lbSlice("ns-a", "sticky-1", "sticky", ports, both...)
	fs.synced()

	onB := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(nodeBAddr, p) }
	waitAsk(t, c.extRun, "tcp", onB(30100))
	// node-a knows node-b's address (its Node) apart from the Services.
	c.waitFor("node-a translates its pod's flows to node-b's node port", func() bool {
		before := tunnelForwarded(t, b.run)
		_, _, err := askService(client, "tcp", onB(30100))
		return err == nil && tunnelForwarded(t, b.run) == before
	})

	c.sub(t, "node port on the other node's address", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			before := tunnelForwarded(t, b.run)
			got, seen, errs := spread(client, proto, onB(30100), 40)
			if n := tunnelForwarded(t, b.run) - before; n != 0 {
				t.Errorf("%s: node-b sent on %d replies from its tunnel, want none (the pod's node translates)", proto, n)
			}
			if len(errs) > 0 || got["web"] == 0 || got["far"] == 0 {
				t.Errorf("%s from a pod on node-a to node-b's node port: answers %v (errors %v), want web and far, none lost", proto, got, errs)
			}
			if len(seen) != 1 || !seen["10.65.0.2"] {
				t.Errorf("%s: the backends saw %v, want the pod's 10.65.0.2", proto, seen)
			}
		}
	})
	c.sub(t, "sessionAffinity ClientIP", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			got, _, errs := spread(client, proto, onB(30101), 16)
			if len(errs) > 0 || len(got) != 1 || (got["web"] != 16 && got["far"] != 16) {
				t.Errorf("%s from a pod on node-a to node-b's sticky node port: answers %v (errors %v), want one backend every time", proto, got, errs)
			}
		}
	})
	c.sub(t, "from the host, connect-time", func(t *testing.T) {
		for _, dst := range []netip.AddrPort{onB(30100), netip.AddrPortFrom(nodeAddr, 30100)} {
			if got := hostSpread(t, cg, c.node.Path(), dst, 30); got["web"] == 0 || got["far"] == 0 || got["web"]+got["far"] != 30 {
				t.Errorf("from node-a's host to %s: answers %v, want web and far, none lost", dst, got)
			}
		}
	})
	c.sub(t, "from the host, connect-time load balancing Disabled", func(t *testing.T) {
		// Left to node-b, which sends the flows to web back through
		// the tunnel: from node-a's own address, which node-a takes.
		// Untranslated, node-a's own node port lands on its own stack,
		// where nothing listens: refused.
		own := netip.AddrPortFrom(nodeAddr, 30100).String()
		c.applyFelixConfig("  bpfConnectTimeLoadBalancing: Disabled\n")
		c.waitFor("the host's connects untranslated", func() bool {
			a := hostClient(t, cg, c.node.Path(), hostAsk{Proto: "tcp", Dst: own, N: 1})
			return len(a) == 1 && a[0].Err != ""
		})
		defer func() {
			c.applyFelixConfig("")
			c.waitFor("translated again", func() bool {
				a := hostClient(t, cg, c.node.Path(), hostAsk{Proto: "tcp", Dst: own, N: 1})
				return len(a) == 1 && a[0].Err == ""
			})
		}()
		dst := onB(30100)
		if got := hostSpread(t, cg, c.node.Path(), dst, 30); got["web"] == 0 || got["far"] == 0 || got["web"]+got["far"] != 30 {
			t.Errorf("from node-a's host to %s, untranslated: answers %v, want web and far, none lost", dst, got)
		}
	})
}

// hostSpread asks dst n times over TCP from a host process of netns (in
// cgroup) and counts the answers by backend ("error: ..." for a failed
// one); every socket must report dst as its peer.
func hostSpread(t *testing.T, cgroup, netns string, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, ans := range hostClient(t, cgroup, netns, hostAsk{Proto: "tcp", Dst: dst.String(), N: n}) {
		if ans.Err != "" {
			got["error: "+ans.Err]++
			continue
		}
		got[ans.Name]++
		if ans.Peer != dst.String() {
			t.Errorf("%s: the socket's peer is %s, want the node port", dst, ans.Peer)
		}
	}
	return got
}
