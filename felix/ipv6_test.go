package felix

import (
	"strings"
	"testing"
)

func allow6(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port, allowed: true, ipv6: true}
}

func deny6(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port, ipv6: true}
}

// TestIPv6 runs policy between dual-stack pods with ipv6Support: felix
// writes the ip6tables chains, the IPv6 members of the sets and the /128
// routes, and IPv6 packets obey the same policy as IPv4 ones.
func TestIPv6(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { testIPv6(t, dp) })
	}
}

func testIPv6(t *testing.T, dp string) {
	c := newClusterIPv6(t, dp, true)
	c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd65::/64"}
`)
	c.addDualPod("ns-a", "web", "10.65.0.1", "fd65::1", map[string]string{"app": "web"}, "sa-w")
	c.addDualPod("ns-a", "client", "10.65.0.2", "fd65::2", map[string]string{"app": "client"}, "sa-x")
	c.addDualPod("ns-b", "other", "10.65.0.3", "fd65::3", map[string]string{"app": "client"}, "sa-y")

	// Profiles only: open.
	c.expect(allow6("client", "web", "tcp", 8080), allow6("other", "web", "udp", 8081), allow6("web", "client", "tcp", 8080))

	rs := c.apply(core[1].yaml) // ingress of web: TCP 8080 from app == 'client' of ns-a
	c.waitPolicies(rs, true)
	c.expect(
		allow6("client", "web", "tcp", 8080), deny6("client", "web", "tcp", 8081), deny6("client", "web", "udp", 8080),
		deny6("other", "web", "tcp", 8080),
		allow6("web", "client", "tcp", 8080),
		// IPv4 the same.
		allow("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080),
	)

	// What made it so, in the kernel.
	if c.bpf {
		c.checkBPFIPv6("web", "fd65::1/128", "fd65::2")
	} else {
		save := c.node.MustRun(t, "ip6tables-nft-save", "-t", "filter")
		for _, want := range []string{":cali-tw-" + c.pods["web"].iface + " ", "-A " + policyChains(rs)[0] + " ", "cali60", "--icmpv6-type 135 "} {
			if !strings.Contains(save, want) {
				t.Errorf("ip6tables filter table lacks %q:\n%s", want, save)
			}
		}
		if sets := c.node.MustRun(t, "ipset", "list"); !strings.Contains(sets, "fd65::2") {
			t.Errorf("no IPv6 set holds client's fd65::2:\n%s", sets)
		}
	}
	if r := c.node.MustRun(t, "ip", "-6", "route", "show", "fd65::1/128"); !strings.Contains(r, "dev "+c.pods["web"].iface) {
		t.Errorf("route to web's IPv6 address = %q", r)
	}

	c.remove(rs)
	c.waitPolicies(rs, false)
	c.expect(allow6("other", "web", "tcp", 8080))
}
