package cniplugin

import (
	"net/netip"
	"slices"
	"testing"
)

// TestIPv6AndDualStack: calico-ipam assigns the families asked for, the
// pod gets /128 (and /32) addresses with default routes via Calico's
// gateways, the host side proxies NDP and routes each address.
func TestIPv6AndDualStack(t *testing.T) {
	cases := []struct {
		name       string
		v4, v6     string
		wantRoutes []string
	}{
		{"IPv6 only", "false", "true", []string{"default via fe80::ecee:eeff:feee:eeee"}},
		{"dual stack", "true", "true", []string{"169.254.1.1/32 scope link", "default via 169.254.1.1", "default via fe80::ecee:eeff:feee:eeee"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.addPool("pool-v4", "10.71.0.0/16", 26)
			c.addPool("pool-v6", "fd00:71::/48", 122)
			n := c.newNode("node1")
			p := n.newPod("default", "v6-pod")
			list := n.calicoConf("1.0.0", map[string]any{"type": "calico-ipam", "assign_ipv4": tc.v4, "assign_ipv6": tc.v6})
			rt := p.runtimeConf(true)
			r, err := n.add(list, rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			_, addrs := resultAddrs(t, r)
			var want []string
			for _, a := range addrs {
				pool := netip.MustParsePrefix("fd00:71::/48")
				if a.Addr().Is4() {
					pool = netip.MustParsePrefix("10.71.0.0/16")
				}
				if !pool.Contains(a.Addr()) || a.Bits() != a.Addr().BitLen() {
					t.Errorf("result address %s: want a host address from %s", a, pool)
				}
				want = append(want, a.String())
			}
			if wantN := boolN(tc.v4) + boolN(tc.v6); len(addrs) != wantN {
				t.Fatalf("result has %v, want %d addresses", addrs, wantN)
			}
			ps := p.state(t)
			for _, a := range addrs {
				if a.Addr().Is6() { // the kernel's prefix route of a /128
					tc.wantRoutes = append(tc.wantRoutes, a.String())
				}
			}
			slices.Sort(ps.addrs)
			slices.Sort(want)
			if !slices.Equal(ps.addrs, want) {
				t.Errorf("pod addresses %v, want %v", ps.addrs, want)
			}
			slices.Sort(ps.routes)
			slices.Sort(tc.wantRoutes)
			if !slices.Equal(ps.routes, tc.wantRoutes) {
				t.Errorf("pod routes %s, want %s", fmtList(ps.routes), fmtList(tc.wantRoutes))
			}
			veth := hostVeth(p, true)
			hs := n.hostState(t, veth)
			for _, key := range []string{"net/ipv6/conf/" + veth + "/proxy_ndp", "net/ipv6/conf/" + veth + "/forwarding"} {
				if hs.sysctls[key] != "1" {
					t.Errorf("sysctl %s = %q, want 1", key, hs.sysctls[key])
				}
			}
			for _, a := range addrs {
				if !slices.Contains(hs.routes, a.String()+" scope link") && !slices.Contains(hs.routes, a.String()) {
					t.Errorf("no host route to %s via %s: %s", a, veth, fmtList(hs.routes))
				}
			}
			if err := n.check(list, rt); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := n.del(list, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := c.allocated(t); len(got) != 0 {
				t.Errorf("addresses left after DEL: %v", got)
			}
		})
	}
}

func boolN(s string) int {
	if s == "true" {
		return 1
	}
	return 0
}
