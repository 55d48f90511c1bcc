package cniplugin

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestCalicoLifecycle runs ADD, inspects the kernel on both sides and the
// datastore, runs CHECK (and sees it fail when the kernel is tampered
// with), runs DEL twice, and finds nothing left.
func TestCalicoLifecycle(t *testing.T) {
	cases := []struct {
		name       string
		cniVersion string
		k8s        bool
		check      bool
	}{
		{"k8s pod, spec 1.0.0", "1.0.0", true, true},
		{"k8s pod, spec 0.3.1", "0.3.1", true, false},
		{"k8s pod, spec 0.4.0", "0.4.0", true, true},
		{"plain container, spec 1.1.0", "1.1.0", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.addPool("pool-a", "10.65.0.0/16", 26)
			n := c.newNode("node1")
			p := n.newPod("team-a", "web-1")
			list := n.calicoConf(tc.cniVersion, nil)
			rt := p.runtimeConf(tc.k8s)

			r, err := n.add(list, rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			res, addrs := resultAddrs(t, r)
			if len(addrs) != 1 || !netip.MustParsePrefix("10.65.0.0/16").Contains(addrs[0].Addr()) || addrs[0].Bits() != 32 {
				t.Fatalf("ADD result addresses %v, want one /32 from 10.65.0.0/16 (result %v)", addrs, res)
			}
			ip := addrs[0].Addr()
			veth := hostVeth(p, tc.k8s)

			// The node's side.
			hs := n.hostState(t, veth)
			if !hs.exists || hs.kind != "veth" || hs.mac != "ee:ee:ee:ee:ee:ee" || hs.mtu != 1450 || !hs.up {
				t.Errorf("host %s: %+v, want an up veth with MAC ee:ee:ee:ee:ee:ee and mtu 1450", veth, hs)
			}
			for key, want := range map[string]string{"net/ipv4/conf/" + veth + "/proxy_arp": "1",
				"net/ipv4/neigh/" + veth + "/proxy_delay": "0", "net/ipv4/conf/" + veth + "/forwarding": "1"} {
				if hs.sysctls[key] != want {
					t.Errorf("sysctl %s = %q, want %q", key, hs.sysctls[key], want)
				}
			}
			if want := []string{ip.String() + "/32 scope link"}; !slices.Equal(hs.routes, want) {
				t.Errorf("host routes via %s: %s, want %s", veth, fmtList(hs.routes), fmtList(want))
			}
			// The workload's side.
			ps := p.state(t)
			if !ps.exists || ps.mtu != 1450 || !slices.Equal(ps.addrs, []string{ip.String() + "/32"}) {
				t.Errorf("pod eth0: %+v, want mtu 1450 and address %s/32", ps, ip)
			}
			wantRoutes := []string{"default via 169.254.1.1", "169.254.1.1/32 scope link"}
			slices.Sort(ps.routes)
			slices.Sort(wantRoutes)
			if !slices.Equal(ps.routes, wantRoutes) {
				t.Errorf("pod routes %s, want %s", fmtList(ps.routes), fmtList(wantRoutes))
			}

			// The datastore.
			orch, ns := "cni", "default"
			if tc.k8s {
				orch, ns = "k8s", "team-a"
			}
			ep := c.endpoint(t, ns, wepName(n, p, tc.k8s))
			if ep == nil {
				t.Fatalf("no workloadendpoint %s/%s", ns, wepName(n, p, tc.k8s))
			}
			want := v3.WorkloadEndpointSpec{Orchestrator: orch, Node: "node1", ContainerID: p.containerID, Endpoint: "eth0",
				IPNetworks: []string{ip.String() + "/32"}, Profiles: []string{"k8s-pod-network"}, InterfaceName: veth, MAC: ps.mac}
			if tc.k8s {
				want.Pod = "web-1"
			} else {
				want.Workload = p.containerID
			}
			if got := ep.Spec; !specEqual(got, want) {
				t.Errorf("workloadendpoint spec\n got %+v\nwant %+v", got, want)
			}
			if ep.Labels["projectcalico.org/namespace"] != ns || ep.Labels["projectcalico.org/orchestrator"] != orch {
				t.Errorf("workloadendpoint labels %v", ep.Labels)
			}
			prof := c.profile(t, "k8s-pod-network")
			if prof == nil {
				t.Fatal("no profile k8s-pod-network")
			}
			wantSel := "has(k8s-pod-network)"
			if tc.k8s {
				wantSel = ""
			}
			if len(prof.Spec.Ingress) != 1 || prof.Spec.Ingress[0].Action != v3.Allow || prof.Spec.Ingress[0].Source.Selector != wantSel ||
				len(prof.Spec.Egress) != 1 || prof.Spec.Egress[0].Action != v3.Allow {
				t.Errorf("profile spec %+v, want ingress allow from %q, egress allow", prof.Spec, wantSel)
			}
			if got := c.handleIPs(t, handleOf(p)); !slices.Equal(got, []netip.Addr{ip}) {
				t.Errorf("IPAM handle %s holds %v, want [%s]", handleOf(p), got, ip)
			}
			attrs, err := c.alloc.GetAssignmentAttributes(context.Background(), ip)
			if err != nil || attrs.Attrs["node"] != "node1" || (tc.k8s && (attrs.Attrs["pod"] != "web-1" || attrs.Attrs["namespace"] != "team-a")) {
				t.Errorf("allocation of %s: %+v, %v", ip, attrs, err)
			}

			if tc.check {
				if err := n.check(list, rt); err != nil {
					t.Errorf("CHECK after ADD: %v", err)
				}
				// Tamper: remove the host route; CHECK must notice.
				_ = n.inNode(func() error {
					link, _ := netlink.LinkByName(veth)
					return netlink.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: netlinkHost(ip), Scope: netlink.SCOPE_LINK})
				})
				if err := n.check(list, rt); err == nil {
					t.Errorf("CHECK passed with the host route to %s removed", ip)
				}
			}

			for i := range 2 {
				if err := n.del(list, rt); err != nil {
					t.Fatalf("DEL #%d: %v", i+1, err)
				}
			}
			if hs := n.hostState(t, veth); hs.exists {
				t.Errorf("after DEL, host still has %s", veth)
			}
			if ps := p.state(t); ps.exists {
				t.Errorf("after DEL, pod still has eth0: %+v", ps)
			}
			if ep := c.endpoint(t, ns, wepName(n, p, tc.k8s)); ep != nil {
				t.Errorf("after DEL, workloadendpoint remains: %+v", ep)
			}
			if got := c.allocated(t); len(got) != 0 {
				t.Errorf("after DEL, addresses still allocated: %v", got)
			}
		})
	}
}

func specEqual(a, b v3.WorkloadEndpointSpec) bool {
	return a.Orchestrator == b.Orchestrator && a.Node == b.Node && a.ContainerID == b.ContainerID && a.Endpoint == b.Endpoint &&
		a.Pod == b.Pod && a.Workload == b.Workload && slices.Equal(a.IPNetworks, b.IPNetworks) &&
		slices.Equal(a.Profiles, b.Profiles) && a.InterfaceName == b.InterfaceName && a.MAC == b.MAC
}
