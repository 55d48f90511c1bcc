package bgp_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestServiceCIDRs: BGPConfiguration serviceClusterIPs and
// serviceExternalIPs ranges are advertised from every node to an external
// BIRD (AS 65001), with the communities prefixAdvertisements attach
// (standard, large, named); a range removed from the configuration is
// withdrawn from BIRD by every node.
func TestServiceCIDRs(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	clusterIPs := netip.MustParsePrefix("10.96.0.0/12")
	externalIPs := netip.MustParsePrefix("198.19.200.0/24")
	conf := &v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
		ServiceClusterIPs:  []v3.ServiceClusterIPBlock{{CIDR: clusterIPs.String()}},
		ServiceExternalIPs: []v3.ServiceExternalIPBlock{{CIDR: externalIPs.String()}},
		Communities:        []v3.Community{{Name: "svc-large", Value: "65000:1:2"}},
		PrefixAdvertisements: []v3.PrefixAdvertisement{
			{CIDR: clusterIPs.String(), Communities: []string{"65000:100", "svc-large"}},
			{CIDR: externalIPs.String(), Communities: []string{"65000:200"}},
		},
	}}
	f.apply(conf)
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 65001}})
	nodes := map[string]string{"n1": "198.18.0.1", "n2": "198.18.0.2"}
	var sb strings.Builder
	sb.WriteString("router id 198.18.0.250;\nprotocol device { }\nprotocol direct { ipv4; interface \"eth0\"; }\n")
	sb.WriteString("template bgp nodes { local 198.18.0.250 as 65001; ipv4 { import all; export none; }; }\n")
	for n, a := range nodes {
		fmt.Fprintf(&sb, "protocol bgp %s from nodes { neighbor %s as 64512; }\n", n, a)
	}
	b := f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, sb.String())
	for n, a := range nodes {
		f.node(n, a+"/24", nil)
		f.start(n)
	}

	// fromAll waits until BIRD has pfx from both nodes (each its own next
	// hop) carrying exactly the given community lines.
	fromAll := func(pfx netip.Prefix, attrs ...string) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("BIRD learns %s from n1 and n2 with %q", pfx, attrs), func() (bool, string) {
			out := b.show("show", "route", "for", pfx.String(), "all")
			ok := strings.Contains(out, "via 198.18.0.1 ") && strings.Contains(out, "via 198.18.0.2 ")
			for _, a := range attrs {
				ok = ok && strings.Count(out, a+"\n") == 2
			}
			return ok, out
		})
	}
	fromAll(clusterIPs, "BGP.community: (65000,100)", "BGP.large_community: (65000, 1, 2)")
	fromAll(externalIPs, "BGP.community: (65000,200)")
	if out := b.show("show", "route", "for", externalIPs.String(), "all"); strings.Contains(out, "large_community") {
		t.Errorf("%s carries a large community it was not given:\n%s", externalIPs, out)
	}

	// Remove the external range: both nodes withdraw it, the cluster
	// range stays.
	conf.Spec.ServiceExternalIPs = nil
	f.apply(conf)
	b.waitHas(externalIPs, false)
	fromAll(clusterIPs, "BGP.community: (65000,100)", "BGP.large_community: (65000, 1, 2)")

	// The nodes originate the cluster range themselves: none of them
	// routes it to another node.
	for n := range nodes {
		if out := f.ours(f.ns[n], clusterIPs.String()); strings.TrimSpace(out) != "" {
			t.Errorf("%s routes the service range %s to a peer: %s", n, clusterIPs, out)
		}
	}
}
