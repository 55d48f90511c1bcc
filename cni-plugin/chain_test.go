package cniplugin

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestChainWithPortmapAndBandwidth runs calico → portmap → bandwidth (the
// reference plugins) as one conflist: the later plugins find calico's
// result usable (portmap writes its DNAT for the pod's address, bandwidth
// finds the host veth and shapes it), and DEL unwinds all three.
func TestChainWithPortmapAndBandwidth(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.69.0.0/16", 26)
	n := c.newNode("node1")
	p := n.newPod("default", "edge-1")
	list := n.calicoConf("1.0.0", nil,
		map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "backend": "iptables"},
		map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
	)
	rt := p.runtimeConf(true)
	rt.CapabilityArgs = map[string]any{
		"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}},
		"bandwidth":    map[string]any{"ingressRate": 1000000, "ingressBurst": 100000, "egressRate": 1000000, "egressBurst": 100000},
	}
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatalf("ADD calico → portmap → bandwidth: %v", err)
	}
	_, addrs := resultAddrs(t, r)
	ip := addrs[0].Addr().String()
	veth := hostVeth(p, true)

	nat := n.run(t, "iptables-save", "-t", "nat")
	if !strings.Contains(nat, "--dport 18080") || !strings.Contains(nat, ip+":80") {
		t.Errorf("portmap left no DNAT of port 18080 to %s:80 in the node:\n%s", ip, nat)
	}
	qdisc := n.run(t, "tc", "qdisc", "show", "dev", veth)
	if !strings.Contains(qdisc, "tbf") {
		t.Errorf("bandwidth put no tbf qdisc on %s: %s", veth, qdisc)
	}
	// Debian's portmap fails CHECK on an IPv4-only result (it looks for
	// its IPv6 chain), so CHECK runs over calico → bandwidth with the
	// same network name, against the chain's cached result.
	checkList := n.calicoConf("1.0.0", nil, map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}})
	if err := n.check(checkList, rt); err != nil {
		t.Errorf("CHECK of calico → bandwidth: %v", err)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatalf("DEL of the chain: %v", err)
	}
	if nat := n.run(t, "iptables-save", "-t", "nat"); strings.Contains(nat, ip+":80") {
		t.Errorf("DNAT to %s:80 left after DEL:\n%s", ip, nat)
	}
	if hs := n.hostState(t, veth); hs.exists {
		t.Errorf("veth %s left after DEL", veth)
	}
	var ifbs []string
	_ = n.inNode(func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if l.Type() == "ifb" {
				ifbs = append(ifbs, l.Attrs().Name)
			}
		}
		return err
	})
	if len(ifbs) != 0 {
		t.Errorf("ifb devices left after DEL: %v", ifbs)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("addresses left after DEL: %v", got)
	}
}

// run executes a command inside the node's namespace.
func (n *node) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.ns.name, name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in node %s: %v: %s", name, args, n.name, err, out)
	}
	return string(out)
}
