package bgp_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestBGPFilter: n1 (dual stack, AS 65000) peers eBGP with BIRD over IPv4
// and IPv6 through BGPPeers naming one BGPFilter; n2 meshes with n1. The
// filter's import rules, in order, keep out of n1's kernel what they
// reject (an exact prefix, longer prefixes of a range, an IPv6 range
// outside the accepted one) and let in the rest; its export rules send
// n2's block on (accepted from remote peers) and keep n1's IPv6 block
// from BIRD while the IPv6 service range still goes.
func TestBGPFilter(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pods6"}, Spec: v3.IPPoolSpec{CIDR: "fd00:244::/48", BlockSize: 122}})
	min25 := int32(25)
	max48 := int32(48)
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPFilterSpec{
		ImportV4: []v3.BGPFilterRuleV4{
			{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorEqual, CIDR: "198.19.101.0/24"},
			{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorIn, CIDR: "198.19.0.0/16", PrefixLength: &v3.BGPFilterPrefixLength{Min: &min25}},
		},
		ImportV6: []v3.BGPFilterRuleV6{
			{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "fd00:1900::/32", PrefixLength: &v3.BGPFilterPrefixLength{Max: &max48}},
			{Action: v3.BGPFilterReject},
		},
		ExportV4: []v3.BGPFilterRuleV4{
			{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "10.244.0.0/16", Source: v3.BGPFilterSourceRemotePeers},
		},
		ExportV6: []v3.BGPFilterRuleV6{
			{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorIn, CIDR: "fd00:244::/48"},
		},
	}})
	svc6 := netip.MustParsePrefix("fd00:96::/112")
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
		ASNumber: asn(65000), ServiceClusterIPs: []v3.ServiceClusterIPBlock{{CIDR: svc6.String()}},
	}})
	for _, ip := range []string{"198.18.0.250", "fd00:198::250"} {
		f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor-" + strings.ReplaceAll(ip, ":", "-")}, Spec: v3.BGPPeerSpec{
			PeerIP: ip, Node: "n1", ASNumber: 65001, Filters: []string{"tor"},
		}})
	}
	b := f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; ipv6; interface "eth0"; }
protocol static { ipv4; route 198.19.100.0/24 blackhole; route 198.19.101.0/24 blackhole; route 198.19.102.0/28 blackhole; }
protocol static { ipv6; route fd00:1900::/48 blackhole; route fd00:1900:1::/56 blackhole; route fd00:1901::/48 blackhole; }
protocol bgp n1 { local 198.18.0.250 as 65001; neighbor 198.18.0.1 as 65000; ipv4 { import all; export where source = RTS_STATIC; }; }
protocol bgp n1v6 { local fd00:198::250 as 65001; neighbor fd00:198::1 as 65000; ipv6 { import all; export where source = RTS_STATIC; }; }
`)
	f.lab.Run("ip", "-n", b.ns, "addr", "add", "fd00:198::250/64", "dev", "eth0", "nodad")
	f.addNS("n1", "198.18.0.1/24", "fd00:198::1/64")
	f.apply(&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n1"}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.1/24", IPv6Address: "fd00:198::1/64"}}})
	f.node("n2", "198.18.0.2/24", nil)
	blk1, blk2 := f.block("n1"), f.block("n2")
	blk6 := f.block6("n1")
	f.start("n1")
	f.start("n2")

	// Imports.
	f.waitRoute(f.ns["n1"], netip.MustParsePrefix("198.19.100.0/24"), "198.18.0.250")
	f.waitRoute6(f.ns["n1"], netip.MustParsePrefix("fd00:1900::/48"), "fd00:198::250")
	// Exports.
	b.waitHas(blk1, true)
	b.waitHas(blk2, true)
	b.waitHas(svc6, true)
	// What the rules reject stays out, checked for a while now that the
	// accepted routes of the same sessions are in.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range []string{"198.19.101.0/24", "198.19.102.0/28"} {
			if out := f.routes(f.ns["n1"], p); strings.Contains(out, "via") {
				t.Fatalf("n1 imported %s, which the filter rejects: %s", p, out)
			}
		}
		for _, p := range []string{"fd00:1900:1::/56", "fd00:1901::/48"} {
			if out := f.routes6(f.ns["n1"], p); strings.Contains(out, "via") {
				t.Fatalf("n1 imported %s, which the filter rejects: %s", p, out)
			}
		}
		if out := b.show("show", "route", "for", blk6.String()); strings.Contains(out, blk6.String()) {
			t.Fatalf("BIRD learned n1's IPv6 block %s, which the filter rejects:\n%s", blk6, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := b.show("show", "route", "for", blk2.String(), "all"); !strings.Contains(out, "BGP.next_hop: 198.18.0.1") {
		t.Errorf("n2's block should reach BIRD from n1:\n%s", out)
	}
}
