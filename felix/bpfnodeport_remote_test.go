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
// whichever node it is on. Both nodes run felix without kube-proxy.
func TestBPFNodePortOtherNode(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	fa, fb := &sliceFeed{c: make(chan []calc.Update)}, &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = fa
	runFelix(t, c.ctx, c.cancel, cfg)
	b := c.addNodeB(fb)
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
}
