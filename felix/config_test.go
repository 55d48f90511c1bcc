package felix

import (
	"fmt"
	"strings"
	"testing"
)

// felixConfigBase is the FelixConfiguration newCluster writes (NFT).
const felixConfigBase = `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: NFT
  ipv6Support: false
  iptablesRefreshInterval: 1s
  routeRefreshInterval: 2s
`

// applyFelixConfig writes FelixConfiguration default as newCluster does
// (the cluster's backend and dataplane) with the spec lines of extra
// ("  field: value\n") added.
func (c *cluster) applyFelixConfig(extra string) {
	c.t.Helper()
	c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: %s
  ipv6Support: false
  bpfEnabled: %t
  iptablesRefreshInterval: 1s
  routeRefreshInterval: 2s
%s`, c.backend, c.bpf, extra))
}

// kernelChain lists the rules of a kernel chain of the filter table as
// iptables-save prints them, in order.
func (c *cluster) kernelChain(chain string) []string {
	var out []string
	for _, l := range strings.Split(c.filter(), "\n") {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, l)
		}
	}
	return out
}

// jumpsAt reports whether our jump is first (Insert) or last (Append) in
// INPUT, FORWARD and OUTPUT, each of which also holds a rule of another
// program.
func (c *cluster) jumpsAt(first bool) bool {
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		rs := c.kernelChain(chain)
		if len(rs) < 2 {
			return false
		}
		at := rs[len(rs)-1]
		if first {
			at = rs[0]
		}
		if !strings.HasSuffix(at, "-j cali-"+chain) {
			return false
		}
	}
	return true
}

// TestChainInsertMode: with Append our jumps go after the rules of other
// programs, so a foreign ACCEPT decides first; with Insert they go first.
func TestChainInsertMode(t *testing.T) {
	c := newCluster(t, "NFT")
	setupPods(c)
	rs := c.apply(core[1].yaml) // web: TCP 8080 from ns-a only.
	c.waitPolicies(rs, true)
	c.expect(allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081))

	// Rules of another program, at the end of the kernel chains: only the
	// FORWARD one matters to the probes.
	c.node.MustRun(t, "iptables-nft", "-A", "FORWARD", "-d", "10.65.0.1", "-p", "tcp", "--dport", "8081", "-j", "ACCEPT")
	c.node.MustRun(t, "iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "9", "-j", "ACCEPT")
	c.node.MustRun(t, "iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "9", "-j", "ACCEPT")
	if !c.jumpsAt(true) {
		t.Fatalf("Insert: our jumps are not first:\n%s", c.filter())
	}
	c.expect(deny("client", "web", "tcp", 8081))

	c.apply(felixConfigBase + "  chainInsertMode: Append\n")
	c.waitFor("our jumps at the end of INPUT, FORWARD and OUTPUT", func() bool { return c.jumpsAt(false) })
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		if n := strings.Count(c.filter(), "-j cali-"+chain+"\n"); n != 1 {
			t.Errorf("%d jumps to cali-%s, want 1", n, chain)
		}
	}
	// The foreign ACCEPT now comes first; the rest is felix's policy.
	c.expect(allow("client", "web", "tcp", 8081), allow("client", "web", "tcp", 8080),
		deny("client", "web", "udp", 8080), deny("other", "web", "tcp", 8080))

	c.apply(felixConfigBase)
	c.waitFor("our jumps first again", func() bool { return c.jumpsAt(true) })
	c.expect(deny("client", "web", "tcp", 8081), allow("client", "web", "tcp", 8080))
}

// TestInterfaceExcludeDefault: an interface interfaceExclude names (by
// default kube-ipvs0, where kube-proxy puts service addresses) is never
// the interface of a host endpoint named by expectedIPs, while another
// interface holding an expected IP is.
func TestInterfaceExcludeDefault(t *testing.T) {
	c := newCluster(t, "NFT")
	for _, l := range []struct{ name, addr string }{{"kube-ipvs0", "198.18.1.1/32"}, {"eth-spare", "198.18.1.2/32"}} {
		c.node.MustRun(t, "ip", "link", "add", l.name, "type", "veth", "peer", "name", l.name+"p")
		c.node.MustRun(t, "ip", "addr", "add", l.addr, "dev", l.name)
	}
	rs := c.apply(`apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-ipvs}
spec: {node: node-a, expectedIPs: [198.18.1.1]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-spare}
spec: {node: node-a, expectedIPs: [198.18.1.2]}
`)
	c.waitFor("the host endpoint chain of eth-spare", func() bool { return strings.Contains(c.filter(), ":cali-fh-eth-spare ") })
	// Both endpoints were resolved in the same apply.
	if f := c.filter(); strings.Contains(f, "kube-ipvs0") {
		t.Errorf("kube-ipvs0 (excluded by default) got host endpoint rules:\n%s", f)
	}
	c.remove(rs)
	c.waitFor("the host endpoint chain removed", func() bool { return !strings.Contains(c.filter(), ":cali-fh-eth-spare ") })
}
