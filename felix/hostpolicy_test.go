package felix

import (
	"strconv"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// hepExt is the host endpoint of the node's interface to the external
// namespace; policies select it by its label.
const hepExt = `apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-ext, labels: {hep: ext}}
spec: {node: node-a, interfaceName: eth-ext}
`

// hasChain reports whether the node's table holds a chain.
func (c *cluster) hasChain(table, chain string) bool {
	return strings.Contains(c.node.MustRun(c.t, c.save, "-t", table), ":"+chain+" ")
}

// waitChain waits until a chain of a table is present or gone.
func (c *cluster) waitChain(table, chain string, present bool) {
	c.t.Helper()
	c.waitFor(table+" chain "+chain+" present="+strconv.FormatBool(present), func() bool {
		return c.hasChain(table, chain) == present
	})
}

// counted is the sum of the packet counters of the rules of a table
// whose text holds every one of parts.
func (c *cluster) counted(table string, parts ...string) int {
	n := 0
	for _, l := range strings.Split(c.node.MustRun(c.t, c.save, "-c", "-t", table), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if m := counterRe.FindStringSubmatch(l); all && m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
	}
	return n
}

// policyChain names the chain of a default-tier GlobalNetworkPolicy.
func policyChain(name string, ingress bool) string {
	return rules.PolicyChain(calc.PolicyID{Tier: "default", Name: name}, ingress)
}

// withHEP applies yaml, waits until table holds chain (with the eBPF
// dataplane: until the host endpoint and its policies are programmed),
// runs body, then removes everything and waits for the host endpoint to
// be gone.
func (c *cluster) withHEP(t *testing.T, yaml, table, chain string, body func()) {
	c.t = t
	rs := c.apply(yaml)
	defer func() {
		c.t = t
		c.remove(rs)
		c.waitHostEndpoint(false)
		if c.bpf {
			c.waitPolicies(rs, false)
		} else {
			c.waitChain(table, chain, false)
		}
		c.expect(allow("ext", "node", "tcp", 8080))
	}()
	c.waitHostEndpoint(true)
	if c.bpf {
		c.waitPolicies(rs, true)
	} else {
		c.waitChain(table, chain, true)
	}
	body()
}

// TestHostEndpointPolicy proves host endpoint policy with packets between
// the external namespace, the node and its pods: normal policy (to and
// from the host), applyOnForward, preDNAT, doNotTrack, and the host
// endpoint of all interfaces.
// hostNormal is the host endpoint of eth-ext with a policy of the host
// (not applyOnForward) allowing TCP 8080 both ways.
var hostNormal = hepExt + "---\n" + gnpHead + `metadata: {name: host-normal}
spec:
  selector: hep == 'ext'
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
  egress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`

func TestHostEndpointPolicy(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { testHostEndpointPolicy(t, dp) })
	}
}

func testHostEndpointPolicy(t *testing.T, dp string) {
	c := newCluster(t, dp)
	setupPods(c)
	// Before any host endpoint: the node and its pods are open to ext.
	c.expect(allow("ext", "node", "tcp", 8080), allow("ext", "node", "udp", 8080), allow("ext", "web", "tcp", 8081),
		allow("node", "ext", "udp", 8080), allow("web", "ext", "tcp", 8080))

	t.Run("normal policy to and from the host", func(t *testing.T) {
		c.withHEP(t, hostNormal, "filter", policyChain("host-normal", true), func() {
			c.expect(
				allow("ext", "node", "tcp", 8080), deny("ext", "node", "udp", 8080),
				// Failsafe.
				allow("ext", "node", "tcp", 22),
				allow("node", "ext", "tcp", 8080), deny("node", "ext", "udp", 8080),
			)
		})
	})

	// Calico: with no applyOnForward policy for a direction, forwarded
	// traffic through a host endpoint is allowed in that direction.
	t.Run("forwarded traffic open without applyOnForward policy", func(t *testing.T) {
		c.withHEP(t, hostNormal, "filter", policyChain("host-normal", true), func() {
			c.expect(allow("ext", "web", "tcp", 8081), allow("ext", "web", "udp", 8080), allow("web", "ext", "udp", 8080))
		})
	})

	t.Run("applyOnForward governs forwarded traffic", func(t *testing.T) {
		c.withHEP(t, hepExt+"---\n"+gnpHead+`metadata: {name: host-fwd}
spec:
  selector: hep == 'ext'
  applyOnForward: true
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`, "filter", policyChain("host-fwd", true), func() {
			if c.bpf {
				// Checked by the packets below.
			} else if !strings.Contains(c.filter(), "-j "+policyChain("host-fwd", true)) || !strings.Contains(c.filter(), ":cali-fhfw-eth-ext ") {
				t.Fatalf("the policy is not in the forward chain of the host endpoint:\n%s", c.filter())
			}
			c.expect(
				allow("ext", "web", "tcp", 8080), deny("ext", "web", "tcp", 8081), deny("ext", "web", "udp", 8080),
				deny("ext", "client", "icmp", 0),
				// It is a policy of the host too.
				allow("ext", "node", "tcp", 8080), deny("ext", "node", "udp", 8080),
				// Pod to pod crosses no host endpoint.
				allow("client", "web", "tcp", 8081),
			)
		})
	})

	t.Run("preDNAT", func(t *testing.T) {
		yaml := hepExt + "---\n" + gnpHead + `metadata: {name: host-prednat}
spec:
  selector: hep == 'ext'
  preDNAT: true
  applyOnForward: true
  types: [Ingress]
  ingress: [{action: Deny, protocol: TCP, destination: {nets: [10.65.0.1/32], ports: [8081]}}]
---
` + gnpHead + `metadata: {name: host-open}
spec:
  selector: hep == 'ext'
  applyOnForward: true
  types: [Ingress, Egress]
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`
		c.withHEP(t, yaml, "mangle", policyChain("host-prednat", true), func() {
			if !c.bpf && c.hasChain("filter", policyChain("host-prednat", true)) {
				t.Errorf("the preDNAT policy has a chain in filter")
			}
			drops := func() int { return c.counted("mangle", "-A "+policyChain("host-prednat", true)+" ", "-j DROP") }
			if c.bpf {
				drops = func() int { return int(c.ruleCount("eth-ext", "default/host-prednat", "Deny")) }
			}
			before := drops()
			c.expect(deny("ext", "web", "tcp", 8081), allow("ext", "web", "tcp", 8080), allow("ext", "client", "tcp", 8081),
				allow("ext", "node", "tcp", 8080))
			if after := drops(); after <= before {
				t.Errorf("the DROP of the preDNAT policy counted no packet (%d then %d):\n%s", before, after,
					c.node.MustRun(t, c.save, "-c", "-t", "mangle"))
			}
		})
	})

	t.Run("doNotTrack", func(t *testing.T) {
		yaml := hepExt + "---\n" + gnpHead + `metadata: {name: host-untracked}
spec:
  selector: hep == 'ext'
  doNotTrack: true
  applyOnForward: true
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: UDP, destination: {ports: [8080]}}]
  egress: [{action: Allow, protocol: UDP, source: {ports: [8080]}}]
`
		c.withHEP(t, yaml, "raw", policyChain("host-untracked", true), func() {
			untracked := func() int { return c.counted("raw", "--notrack") }
			if c.bpf {
				untracked = func() int { return int(c.ruleCount("eth-ext", "default/host-untracked", "Allow")) }
			} else {
				raw := c.node.MustRun(t, c.save, "-t", "raw")
				for _, chain := range []string{policyChain("host-untracked", true), policyChain("host-untracked", false)} {
					if !strings.Contains(raw, "-A "+chain+" ") || !regexpCT(raw, chain) {
						t.Errorf("raw chain %s has no CT --notrack rule:\n%s", chain, raw)
					}
				}
				if c.hasChain("filter", policyChain("host-untracked", true)) {
					t.Errorf("the untracked policy has a chain in filter")
				}
			}
			before := untracked()
			c.send(allow("ext", "node", "udp", 8080))
			if after := untracked(); after <= before {
				t.Errorf("the untracked Allow rules counted no packet (%d then %d)", before, after)
			}
			// No tracked policy: only the untracked UDP gets in.
			c.expect(allow("ext", "node", "udp", 8080), deny("ext", "node", "tcp", 8080), allow("ext", "node", "tcp", 22))
		})
		// Without the untracked policy the same UDP is denied.
		rs := c.apply(hepExt)
		c.waitHostEndpoint(true)
		c.expect(deny("ext", "node", "udp", 8080))
		c.remove(rs)
		c.waitHostEndpoint(false)
	})

	allIfaces := `apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-all, labels: {hep: all}}
spec: {node: node-a, interfaceName: "*"}
---
` + gnpHead + `metadata: {name: host-all}
spec:
  selector: hep == 'all'
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
  egress: [{action: Allow, protocol: TCP}]
`
	withAll := func(t *testing.T, body func()) {
		c.t = t
		rs := c.apply(allIfaces)
		defer func() {
			c.t = t
			c.remove(rs)
			if c.bpf {
				c.waitHostEndpoint(false)
			} else {
				c.waitChain("filter", "cali-fh-any", false)
			}
			c.expect(allow("ext", "node", "udp", 8080))
		}()
		if c.bpf {
			c.waitHostEndpoint(true)
			c.waitPolicies(rs, true)
		} else {
			c.waitChain("filter", "cali-fh-any", true)
		}
		body()
	}
	t.Run("all interfaces", func(t *testing.T) {
		withAll(t, func() {
			c.expect(allow("ext", "node", "tcp", 8080), deny("ext", "node", "udp", 8080), allow("ext", "node", "tcp", 22),
				allow("node", "ext", "tcp", 8080), deny("node", "ext", "udp", 8080),
				// Host to pod stays open.
				allow("node", "web", "tcp", 8081))
		})
	})
	// Traffic between pods enters and leaves by workload interfaces only.
	t.Run("all interfaces leave pod to pod alone", func(t *testing.T) {
		withAll(t, func() { c.expect(allow("client", "web", "tcp", 8081), allow("web", "client", "udp", 8080)) })
	})
	// Calico: a host endpoint naming an interface wins over "*" for it.
	t.Run("named host endpoint wins over all interfaces", func(t *testing.T) {
		withAll(t, func() {
			named := c.apply(hepExt)
			defer func() {
				c.remove(named)
				if !c.bpf {
					c.waitChain("filter", "cali-fh-eth-ext", false)
				}
			}()
			if c.bpf {
				// eth-ext is a host endpoint through "*" already: wait
				// for the named one's normal stage (no policy: deny).
				c.waitFor("eth-ext's own host endpoint", func() bool { ok, _ := c.send(allow("ext", "node", "tcp", 8080)); return !ok })
			} else {
				c.waitChain("filter", "cali-fh-eth-ext", true)
			}
			c.expect(deny("ext", "node", "tcp", 8080), allow("ext", "node", "tcp", 22))
		})
	})
}

// regexpCT reports whether chain of a raw table dump has a CT --notrack
// rule.
func regexpCT(raw, chain string) bool {
	for _, l := range strings.Split(raw, "\n") {
		if strings.HasPrefix(l, "-A "+chain+" ") && strings.Contains(l, "-j CT --notrack") {
			return true
		}
	}
	return false
}

var _ = v3.KindHostEndpoint

// TestFailsafeNet: a failsafe port with a net is open only to that range
// (the source inbound, the destination outbound): closed to ext when the
// net leaves ext out, open when it holds ext.
func TestFailsafeNet(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { testFailsafeNet(t, dp) })
	}
}

func testFailsafeNet(t *testing.T, dp string) {
	c := newCluster(t, dp)
	rs := c.apply(hepExt)
	c.waitHostEndpoint(true)
	// The default failsafe ports have no net: SSH is open to ext.
	c.expect(allow("ext", "node", "tcp", 22), deny("ext", "node", "tcp", 8080), deny("node", "ext", "tcp", 8080))
	withNet := func(net string) {
		c.apply(c.felixConfig() + "  failsafeInboundHostPorts: [{protocol: TCP, port: 22, net: " + net + "}]\n" +
			"  failsafeOutboundHostPorts: [{protocol: TCP, port: 8080, net: " + net + "}]\n")
		if c.bpf {
			return // the probes below wait for the ports
		}
		c.waitFor("failsafe ports limited to "+net, func() bool {
			f := c.filter()
			return strings.Contains(f, "-A cali-failsafe-in -s "+net+" -p tcp") && strings.Contains(f, "-A cali-failsafe-out -d "+net+" -p tcp")
		})
	}
	withNet("198.18.0.3/32")
	c.expect(deny("ext", "node", "tcp", 22), deny("node", "ext", "tcp", 8080))
	withNet("198.18.0.0/24")
	c.expect(allow("ext", "node", "tcp", 22), allow("node", "ext", "tcp", 8080))
	c.apply(c.felixConfig())
	c.remove(rs)
	c.waitHostEndpoint(false)
}
