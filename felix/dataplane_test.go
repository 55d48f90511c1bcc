package felix

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
)

// waitFor polls cond until it holds or fails the test after 10 s.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cluster) filter() string { return c.node.MustRun(c.t, c.save, "-t", "filter") }

var counterRe = regexp.MustCompile(`^\[(\d+):\d+\]`)

// TestDataplane covers what is beyond rule semantics: logging, NAT,
// host endpoints, the endpoint-to-host action, tamper repair, the fail
// closed dispatch, routes and endpoint status.
func TestDataplane(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { testDataplane(t, dp) })
	}
}

func testDataplane(t *testing.T, dp string) {
	c := newCluster(t, dp)
	setupPods(c)
	web := c.pods["web"]

	t.Run("log", func(t *testing.T) {
		c.t = t
		var packets *packetLog
		if c.bpf {
			packets = capturePacketLog(t)
		}
		rs := c.apply(gnpHead + `metadata: {name: log}
spec:
  selector: app == 'web'
  ingress: [{action: Log, protocol: TCP}, {action: Allow}]
`)
		defer func() { c.remove(rs); c.waitPolicies(rs, false) }()
		c.waitPolicies(rs, true)
		c.expect(allow("client", "web", "tcp", 8080))
		if c.bpf {
			if n := c.ruleCount(web.iface, "default/log", "Log"); n == 0 {
				t.Errorf("the Log rule counted no packet")
			}
			c.waitFor("felix's calico-packet line for the Log rule", func() bool { return packets.has(web.iface, "log") })
			return
		}
		out := c.node.MustRun(t, c.save, "-c", "-t", "filter")
		logged := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "-j LOG") && strings.Contains(l, "calico-packet") {
				if m := counterRe.FindStringSubmatch(l); m != nil {
					n, _ := strconv.Atoi(m[1])
					logged += n
				}
			}
		}
		if logged == 0 {
			t.Errorf("the LOG rule counted no packet:\n%s", out)
		}
	})

	t.Run("natOutgoing", func(t *testing.T) {
		c.t = t
		c.expect(probe{from: "web", to: "ext", proto: "tcp", port: 8080, allowed: true, seenFrom: "10.65.0.1"})
		c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16, natOutgoing: true}
`)
		masq := func(want bool) func() bool {
			return func() bool {
				out, _ := c.node.Run("ipset", "list", "cali40masq-ipam-pools")
				return strings.Contains(out, "10.65.0.0/16") == want
			}
		}
		c.waitFor("the pool in the masquerade set", masq(true))
		c.expect(probe{from: "web", to: "ext", proto: "tcp", port: 8080, allowed: true, seenFrom: nodeAddr.String()},
			probe{from: "web", to: "ext", proto: "udp", port: 8080, allowed: true, seenFrom: nodeAddr.String()},
			// Pool to pool is not masqueraded.
			probe{from: "web", to: "client", proto: "tcp", port: 8080, allowed: true, seenFrom: "10.65.0.1"})
		c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16}
`)
		c.waitFor("the pool out of the masquerade set", masq(false))
		c.expect(probe{from: "web", to: "ext", proto: "tcp", port: 8081, allowed: false},
			probe{from: "web", to: "ext", proto: "tcp", port: 8080, allowed: true, seenFrom: "10.65.0.1"})
	})

	t.Run("host endpoint failsafe", func(t *testing.T) {
		c.t = t
		c.expect(allow("ext", "node", "tcp", 8080), allow("ext", "node", "tcp", 22))
		rs := c.apply(`apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-ext}
spec: {node: node-a, interfaceName: eth-ext}
`)
		c.waitHostEndpoint(true)
		// No policy and no profile: only the failsafe ports are open.
		c.expect(allow("ext", "node", "tcp", 22), deny("ext", "node", "tcp", 8080), deny("ext", "node", "udp", 8080))
		c.remove(rs)
		c.waitHostEndpoint(false)
		c.expect(allow("ext", "node", "tcp", 8080))

		// Named by its expected IP only: felix finds the interface.
		rs = c.apply(`apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-ext-by-ip}
spec: {node: node-a, expectedIPs: [198.18.0.1]}
`)
		c.waitHostEndpoint(true)
		c.expect(allow("ext", "node", "tcp", 22), deny("ext", "node", "tcp", 8080))
		c.remove(rs)
		c.waitHostEndpoint(false)
		c.expect(allow("ext", "node", "tcp", 8080))
	})

	t.Run("defaultEndpointToHostAction", func(t *testing.T) {
		c.t = t
		setAction := func(action string) {
			c.apply(c.felixConfig() + "  defaultEndpointToHostAction: " + action + "\n")
			if c.bpf {
				c.waitFor("web's entry with the action", func() bool { return c.toHostOK(web.iface) == (action != "Drop") })
				return
			}
			target := map[string]string{"Drop": "DROP", "Accept": "ACCEPT", "Return": "RETURN"}[action]
			c.waitFor("cali-wl-to-host ends in "+target, func() bool {
				return regexp.MustCompile(`-A cali-wl-to-host .*DefaultEndpointToHostAction.* -j ` + target + `\n`).MatchString(c.filter())
			})
		}
		c.expect(deny("web", "node", "tcp", 8080))
		setAction("Accept")
		c.expect(allow("web", "node", "tcp", 8080), allow("web", "node", "udp", 8080))
		setAction("Return")
		c.expect(allow("web", "node", "tcp", 8080))
		setAction("Drop")
		c.expect(deny("web", "node", "tcp", 8080))
	})

	t.Run("tamper repaired by the refresh", func(t *testing.T) {
		c.t = t
		rs := c.apply(core[1].yaml)
		defer func() { c.remove(rs); c.waitPolicies(rs, false) }()
		c.waitPolicies(rs, true)
		c.expect(deny("client", "web", "tcp", 8081))
		if c.bpf {
			// Detach web's program by hand: its port 8081 opens. The
			// refresh (every second) may repair it before the probe on a
			// busy machine: detach again then.
			for try := 1; ; try++ {
				c.detachByHand(web.iface)
				if ok, _ := c.send(allow("client", "web", "tcp", 8081)); ok {
					break
				}
				if try == 5 {
					t.Fatal("detaching the program by hand did not open port 8081: the tamper test proves nothing")
				}
			}
			// iptablesRefreshInterval (1s) reads the eBPF dataplane back
			// too; on a busy machine the reload may take longer than the
			// probes' own second.
			c.waitFor("web's program back (port 8081 closed)", func() bool {
				ok, _ := c.send(allow("client", "web", "tcp", 8081))
				return !ok
			})
			c.expect(deny("client", "web", "tcp", 8081), allow("client", "web", "tcp", 8080))
			return
		}
		chain := "cali-tw-" + web.iface
		// Flush the endpoint's chain by hand: its DROPs are gone.
		n := strings.Count(c.filter(), "-A "+chain+" ")
		// The refresh (every second) may repair it before the probe on a
		// busy machine: flush again then.
		for try := 1; ; try++ {
			c.node.MustRun(t, "iptables-nft", "-F", chain)
			if ok, _ := c.send(allow("client", "web", "tcp", 8081)); ok {
				break
			}
			if try == 5 {
				t.Fatal("flushing the chain by hand did not open port 8081: the tamper test proves nothing")
			}
		}
		// iptablesRefreshInterval is 1s.
		c.waitFor("the chain's rules back", func() bool { return strings.Count(c.filter(), "-A "+chain+" ") == n })
		c.expect(deny("client", "web", "tcp", 8081), allow("client", "web", "tcp", 8080))
	})

	t.Run("unknown cali interface fails closed", func(t *testing.T) {
		c.t = t
		rogue := &pod{ns: "ns-a", name: "rogue", ip: netip.MustParseAddr("10.65.0.9"), iface: "caliunknown01"}
		rogue.netns = nstest.New(t, c.prefix, "rogue")
		rogue.run = nstest.Runner(t, rogue.netns)
		podH, podNS := nstest.Handle(t, rogue.netns)
		if err := nstest.Workload(c.nodeH, podH, podNS, rogue.iface, rogue.ip); err != nil {
			t.Fatal(err)
		}
		var err error
		if rogue.srv, err = nstest.Serve(rogue.run, 8080); err != nil {
			t.Fatal(err)
		}
		defer rogue.srv.Close()
		// A route to it by hand: the kernel could deliver, felix's
		// dispatch must not.
		c.node.MustRun(t, "ip", "route", "add", "10.65.0.9/32", "dev", rogue.iface, "scope", "link")
		c.pods["rogue"] = rogue
		defer delete(c.pods, "rogue")
		c.expect(deny("rogue", "web", "tcp", 8080), deny("rogue", "node", "tcp", 8080), deny("web", "rogue", "tcp", 8080),
			deny("rogue", "web", "icmp", 0))
		// routeRefreshInterval is 2s: the route nobody wants goes away.
		c.waitFor("the unwanted route removed", func() bool {
			out := c.node.MustRun(t, "ip", "route", "show", "10.65.0.9/32")
			return strings.TrimSpace(out) == ""
		})
	})

	t.Run("routes and status follow the endpoint", func(t *testing.T) {
		c.t = t
		route := func() string {
			return strings.TrimSpace(c.node.MustRun(t, "ip", "-d", "route", "show", "10.65.0.3/32"))
		}
		if r := route(); !strings.Contains(r, "dev "+names.VethNameForWorkload("ns-b", "other")) || !strings.Contains(r, "proto boot") || !strings.Contains(r, "scope link") {
			t.Errorf("route to other = %q, want dev %s proto boot scope link", r, names.VethNameForWorkload("ns-b", "other"))
		}
		wepName := names.WorkloadEndpointName(nodeName, "k8s", "other", "eth0")
		status := filepath.Join(c.statusDir, dataplane.StatusFileName("ns-b", wepName))
		data, err := os.ReadFile(status)
		if err != nil || !strings.Contains(string(data), `"status":"up"`) || !strings.Contains(string(data), "10.65.0.3/32") {
			t.Errorf("status file %s = %s, %v", status, data, err)
		}
		// Felix removes the route itself (the test never added it).
		c.node.MustRun(t, "ip", "route", "del", "10.65.0.3/32")
		c.waitFor("route put back by the refresh", func() bool { return route() != "" })
		if _, err := c.store.Delete(c.ctx, datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: "ns-b", Name: wepName}, ""); err != nil {
			t.Fatal(err)
		}
		c.waitFor("route, chains and status gone", func() bool {
			_, err := os.Stat(status)
			if c.bpf {
				// The veth stays: an interface no endpoint has is blocked.
				return route() == "" && os.IsNotExist(err) && c.ifaceKind(names.VethNameForWorkload("ns-b", "other")) == "blocked"
			}
			return route() == "" && os.IsNotExist(err) && !strings.Contains(c.filter(), "cali-tw-"+names.VethNameForWorkload("ns-b", "other"))
		})
		delete(c.pods, "other")
	})
}
