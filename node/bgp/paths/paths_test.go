package paths

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func pool(name, cidr string, noExport bool) v3.IPPool {
	return v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr, DisableBGPExport: noExport}}
}

func vxlanPool(name, cidr string, mode v3.EncapMode) v3.IPPool {
	p := pool(name, cidr, false)
	p.Spec.VXLANMode = mode
	return p
}

func blk(cidr, host string, allocs ...ipam.Allocation) ipam.Block {
	return ipam.Block{CIDR: netip.MustParsePrefix(cidr), Host: host, Allocations: allocs}
}

func alloc(ip, node string) ipam.Allocation {
	a := ipam.Allocation{IP: netip.MustParseAddr(ip), HandleID: "h-" + ip, Attrs: map[string]string{}}
	if node != "" {
		a.Attrs["node"] = node
	}
	return a
}

func aff(host, cidr string, state ipam.AffinityState) ipam.Affinity {
	return ipam.Affinity{Host: host, CIDR: netip.MustParsePrefix(cidr), State: state}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func ptr[T any](v T) *T { return &v }

var (
	v4 = netip.MustParseAddr("198.18.0.1")
	v6 = netip.MustParseAddr("fd00:198:18::1")
)

// cases are the inputs whose results are compared with
// testdata/<name>.golden. NodeName is always "node-a".
var cases = []struct {
	name string
	in   Input
}{
	{
		// The pool ran out of free blocks: node-a holds an address in
		// node-b's block (a host route, /32 and /128) and node-b one in
		// node-a's (lent: node-b advertises it; node-a imports it despite
		// its block). Addresses of a block node-a claims but has not
		// confirmed, in a pool without export, or held by nobody named
		// are not advertised.
		name: "borrowed",
		in: Input{
			IPv4: v4, IPv6: v6,
			Pools: []v3.IPPool{pool("pods", "10.244.0.0/24", false), pool("pods6", "fd00:244::/120", false), pool("private", "10.245.0.0/24", true)},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
				aff("node-b", "10.244.0.64/26", ipam.AffinityConfirmed),
				aff("node-b", "fd00:244::/122", ipam.AffinityConfirmed),
				aff("node-a", "10.244.0.128/26", ipam.AffinityPending),
			},
			Blocks: []ipam.Block{
				blk("10.244.0.0/26", "node-a", alloc("10.244.0.1", "node-a"), alloc("10.244.0.2", "node-b"), alloc("10.244.0.3", "")),
				blk("10.244.0.64/26", "node-b", alloc("10.244.0.65", "node-b"), alloc("10.244.0.66", "node-a")),
				blk("fd00:244::/122", "node-b", alloc("fd00:244::5", "node-a")),
				blk("10.244.0.128/26", "node-a", alloc("10.244.0.129", "node-a")),
				blk("10.245.0.0/26", "", alloc("10.245.0.9", "node-a")),
			},
		},
	},
	{
		// Floating IPs of node-a's workloads are host routes from node-a
		// (in an exported pool only); another node's floating IP in one
		// of node-a's blocks is lent (node-b advertises it).
		name: "floating",
		in: Input{
			NodeName: "node-a", IPv4: v4, IPv6: v6, FloatingEnabled: true,
			Pools:      []v3.IPPool{pool("pods", "10.244.0.0/24", false), pool("pods6", "fd00:244::/120", false), pool("private", "10.245.0.0/24", true)},
			Affinities: []ipam.Affinity{aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed)},
			Floating: []Floating{{"node-a", netip.MustParseAddr("10.244.0.200")}, {"node-a", netip.MustParseAddr("fd00:244::f9")},
				{"node-a", netip.MustParseAddr("10.245.0.9")}, {"node-a", netip.MustParseAddr("203.0.113.9")},
				{"node-b", netip.MustParseAddr("10.244.0.201")}, {"node-b", netip.MustParseAddr("10.244.0.9")}},
		},
	},
	{
		// Workload addresses no IPAM block holds (host-local IPAM):
		// node-a's own in an exported pool get a host route; those in
		// a block (node-a's or another's), outside every pool, in a pool
		// with disableBGPExport, or of another node do not.
		name: "workloads-outside-blocks",
		in: Input{
			NodeName: "node-a", IPv4: v4, IPv6: v6,
			Pools:      []v3.IPPool{pool("pods", "10.244.0.0/16", false), pool("pods6", "fd00:244::/64", false), pool("private", "10.245.0.0/24", true)},
			Affinities: []ipam.Affinity{aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed)},
			Blocks:     []ipam.Block{blk("10.244.0.0/26", "node-a"), blk("10.244.0.64/26", "node-b")},
			Workloads: []Floating{{"node-a", netip.MustParseAddr("10.244.7.5")}, {"node-a", netip.MustParseAddr("fd00:244::7:5")},
				{"node-a", netip.MustParseAddr("10.244.0.5")}, {"node-a", netip.MustParseAddr("10.244.0.70")},
				{"node-a", netip.MustParseAddr("10.245.0.5")}, {"node-a", netip.MustParseAddr("192.0.2.5")},
				{"node-b", netip.MustParseAddr("10.244.8.5")}},
		},
	},
	{
		// The same with floatingIPs not Enabled on node-a: none of its
		// own are advertised.
		name: "floating-disabled",
		in: Input{
			NodeName: "node-a", IPv4: v4, IPv6: v6,
			Pools:      []v3.IPPool{pool("pods", "10.244.0.0/24", false)},
			Affinities: []ipam.Affinity{aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed)},
			Floating:   []Floating{{"node-a", netip.MustParseAddr("10.244.0.200")}, {"node-b", netip.MustParseAddr("10.244.0.9")}},
		},
	},
	{
		// Only node-a's confirmed affinities are its blocks; pending ones
		// (a claim in progress) and pending-deletion ones are not, nor are
		// other nodes' blocks.
		name: "affinity-states",
		in: Input{
			IPv4:  v4,
			Pools: []v3.IPPool{pool("pods", "10.244.0.0/16", false)},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.244.0.64/26", ipam.AffinityPending),
				aff("node-a", "10.244.0.128/26", ipam.AffinityPendingDeletion),
				aff("node-b", "10.244.1.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.244.3.0/26", ipam.AffinityConfirmed),
			},
		},
	},
	{
		// A pool with disableBGPExport: its blocks are blackholed and kept
		// from import, but not advertised.
		name: "disable-bgp-export",
		in: Input{
			IPv4: v4,
			Pools: []v3.IPPool{
				pool("exported", "10.244.0.0/16", false),
				pool("private", "10.245.0.0/16", true),
			},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.245.0.0/26", ipam.AffinityConfirmed),
			},
		},
	},
	{
		// Nested pools: the most specific pool holding a block decides,
		// whichever way round the export flags are; a block in no pool
		// (its pool deleted) is not advertised.
		name: "most-specific-pool",
		in: Input{
			IPv4: v4,
			Pools: []v3.IPPool{
				pool("wide-exported", "10.0.0.0/8", false),
				pool("narrow-private", "10.1.0.0/16", true),
				pool("wide-private", "172.16.0.0/12", true),
				pool("narrow-exported", "172.17.0.0/16", false),
			},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.1.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.2.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "172.17.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "172.18.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "192.168.0.0/26", ipam.AffinityConfirmed),
			},
		},
	},
	{
		// IPv6 blocks carry the node's IPv6 next hop; without an IPv6
		// address (second case) they are blackholed but not advertised.
		name: "dual-stack",
		in: Input{
			IPv4: v4, IPv6: v6,
			Pools: []v3.IPPool{pool("v4", "10.244.0.0/16", false), pool("v6", "fd00:244::/48", false)},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "fd00:244::/122", ipam.AffinityConfirmed),
				aff("node-b", "fd00:244::40/122", ipam.AffinityConfirmed),
			},
		},
	},
	{
		// VXLAN pools (Always, CrossSubnet, IPv6 too): their blocks are
		// advertised as any other, as Calico's BIRD does, and their CIDRs
		// are felix's to route (never imported into the kernel); a Never
		// pool's are not.
		name: "vxlan-pools",
		in: Input{
			IPv4: v4, IPv6: v6,
			Pools: []v3.IPPool{
				vxlanPool("always", "10.244.0.0/16", v3.EncapAlways),
				vxlanPool("cross", "10.245.0.0/16", v3.EncapCrossSubnet),
				vxlanPool("routed", "10.246.0.0/16", v3.EncapNever),
				vxlanPool("v6", "fd00:244::/48", v3.EncapAlways),
			},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.245.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "10.246.0.0/26", ipam.AffinityConfirmed),
				aff("node-a", "fd00:244::/122", ipam.AffinityConfirmed),
			},
		},
	},
	{
		name: "ipv4-only-node",
		in: Input{
			IPv4:       v4,
			Pools:      []v3.IPPool{pool("v4", "10.244.0.0/16", false), pool("v6", "fd00:244::/48", false)},
			Affinities: []ipam.Affinity{aff("node-a", "fd00:244::/122", ipam.AffinityConfirmed)},
		},
	},
	{
		// Service ranges of all three kinds, from every node; host bits
		// are masked, a range listed twice is advertised once, an IPv6
		// range goes with the IPv6 next hop, a bad CIDR is reported and
		// skipped.
		name: "services",
		in: Input{
			IPv4: v4, IPv6: v6,
			Config: &v3.BGPConfigurationSpec{
				ServiceClusterIPs:      []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/112"}},
				ServiceExternalIPs:     []v3.ServiceExternalIPBlock{{CIDR: "198.19.200.7/24"}, {CIDR: "10.96.0.0/12"}, {CIDR: "198.19.300.0/24"}},
				ServiceLoadBalancerIPs: []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.201.0/24"}},
			},
		},
	},
	{
		// Single Service addresses, dual-stack: a Service with
		// externalTrafficPolicy Local is advertised as /32 and /128 for
		// its cluster, external and LoadBalancer addresses while node-a
		// holds a ready endpoint; internalTrafficPolicy Local does it for
		// cluster IPs only; without a local endpoint nothing; Cluster
		// policy Services are covered by the ranges alone; addresses
		// outside every range of their kind (an external IP in the
		// LoadBalancer range, a LoadBalancer IP in no range) are not
		// advertised; communities of the covering prefixAdvertisements
		// apply to the /32s.
		name: "service-ips",
		in: Input{
			IPv4: v4, IPv6: v6,
			Config: &v3.BGPConfigurationSpec{
				ServiceClusterIPs:      []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/112"}},
				ServiceExternalIPs:     []v3.ServiceExternalIPBlock{{CIDR: "198.19.200.0/24"}},
				ServiceLoadBalancerIPs: []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.201.0/24"}, {CIDR: "fd00:201::/112"}},
				PrefixAdvertisements: []v3.PrefixAdvertisement{
					{CIDR: "198.19.201.0/24", Communities: []string{"65000:201"}},
					{CIDR: "198.19.201.10/32", Communities: []string{"65000:10"}},
				},
			},
			Services: []Service{
				{Name: "default/local-here", ExternalLocal: true, LocalEndpoint: true,
					ClusterIPs:      addrs("10.96.0.10", "fd00:96::10"),
					ExternalIPs:     addrs("198.19.200.10", "198.19.201.99"),
					LoadBalancerIPs: addrs("198.19.201.10", "fd00:201::10", "203.0.113.10")},
				{Name: "default/local-elsewhere", ExternalLocal: true,
					ClusterIPs: addrs("10.96.0.20"), LoadBalancerIPs: addrs("198.19.201.20")},
				{Name: "default/internal-local", InternalLocal: true, LocalEndpoint: true,
					ClusterIPs: addrs("10.96.0.30"), LoadBalancerIPs: addrs("198.19.201.30")},
				{Name: "default/cluster", LocalEndpoint: true,
					ClusterIPs: addrs("10.96.0.40"), LoadBalancerIPs: addrs("198.19.201.40")},
			},
		},
	},
	{
		// serviceLoadBalancerAggregation Disabled: the LoadBalancer range
		// is not advertised, each LoadBalancer address is, as /32 or
		// /128, from every node for Cluster policy (while the Service has
		// a ready endpoint anywhere) and only from nodes with a ready
		// endpoint for Local; cluster IPs keep their range.
		name: "service-lb-disaggregated",
		in: Input{
			IPv4: v4, IPv6: v6,
			Config: &v3.BGPConfigurationSpec{
				ServiceClusterIPs:              []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}},
				ServiceLoadBalancerIPs:         []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.201.0/24"}, {CIDR: "fd00:201::/112"}},
				ServiceLoadBalancerAggregation: ptr("Disabled"),
			},
			Services: []Service{
				{Name: "default/cluster", AnyEndpoint: true, ClusterIPs: addrs("10.96.0.40"), LoadBalancerIPs: addrs("198.19.201.40", "fd00:201::40")},
				{Name: "default/cluster-no-endpoints", LoadBalancerIPs: addrs("198.19.201.50")},
				{Name: "default/local-elsewhere", ExternalLocal: true, AnyEndpoint: true, ClusterIPs: addrs("10.96.0.20"), LoadBalancerIPs: addrs("198.19.201.20")},
				{Name: "default/local-here", ExternalLocal: true, LocalEndpoint: true, AnyEndpoint: true, LoadBalancerIPs: addrs("198.19.201.10")},
				{Name: "default/outside", AnyEndpoint: true, LoadBalancerIPs: addrs("203.0.113.1")},
			},
		},
	},
	{
		// Services without any service range configured advertise
		// nothing.
		name: "service-ips-no-ranges",
		in: Input{
			IPv4:   v4,
			Config: &v3.BGPConfigurationSpec{},
			Services: []Service{
				{Name: "default/local-here", ExternalLocal: true, LocalEndpoint: true,
					ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.19.201.10")},
			},
		},
	},
	{
		// Without an IPv4 address, IPv4 service ranges are not advertised.
		name: "services-ipv6-only-node",
		in: Input{
			IPv6: v6,
			Config: &v3.BGPConfigurationSpec{
				ServiceClusterIPs: []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/112"}},
			},
		},
	},
	{
		// Communities: standard and large values, named ones resolved,
		// every prefixAdvertisement whose CIDR holds the prefix applies
		// (a duplicate value is attached once), prefixes no advertisement
		// covers get none, bad values and CIDRs are reported.
		name: "communities",
		in: Input{
			IPv4:  v4,
			Pools: []v3.IPPool{pool("pods", "10.244.0.0/16", false)},
			Affinities: []ipam.Affinity{
				aff("node-a", "10.244.0.0/26", ipam.AffinityConfirmed),
			},
			Config: &v3.BGPConfigurationSpec{
				ServiceClusterIPs:  []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}},
				ServiceExternalIPs: []v3.ServiceExternalIPBlock{{CIDR: "198.19.200.0/24"}},
				Communities: []v3.Community{
					{Name: "no-export-here", Value: "65000:100"},
					{Name: "big", Value: "4200000000:1:2"},
				},
				PrefixAdvertisements: []v3.PrefixAdvertisement{
					{CIDR: "10.244.0.0/16", Communities: []string{"no-export-here", "65000:200"}},
					{CIDR: "10.96.0.0/12", Communities: []string{"big", "65000:300:400"}},
					{CIDR: "10.0.0.0/8", Communities: []string{"65000:999", "65000:100"}},
					{CIDR: "10.244.0.0/26", Communities: []string{"70000:1", "not-a-community", "1:2:3:4"}},
					{CIDR: "10.300.0.0/16", Communities: []string{"65000:1"}},
				},
			},
		},
	},
}

// golden is what a case's golden file holds.
type golden struct {
	Result Result   `json:"result"`
	Errors []string `json:"errors,omitempty"`
}

// TestGolden computes each case's paths and compares them with
// testdata/<case>.golden (rewritten with -update).
func TestGolden(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.NodeName = "node-a"
			res, errs := Compute(in)
			g := golden{Result: res}
			for _, e := range errs {
				g.Errors = append(g.Errors, e.Error())
			}
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs from the computed paths:\n%s", file, got)
			}
		})
	}
}

// TestRules checks the rules the golden files encode, independently of
// them, so a wrong golden file cannot pass unnoticed.
func TestRules(t *testing.T) {
	find := func(name string) Input {
		for _, c := range cases {
			if c.name == name {
				in := c.in
				in.NodeName = "node-a"
				return in
			}
		}
		t.Fatalf("no case %q", name)
		return Input{}
	}
	advertised := func(r Result, pfx string) *Path {
		for i := range r.Paths {
			if r.Paths[i].Prefix == netip.MustParsePrefix(pfx) {
				return &r.Paths[i]
			}
		}
		return nil
	}
	has := func(list []netip.Prefix, pfx string) bool {
		for _, p := range list {
			if p == netip.MustParsePrefix(pfx) {
				return true
			}
		}
		return false
	}
	tests := []struct {
		input     string
		prefix    string
		advertise bool
		block     bool // in Blocks and Blackholes
		nextHop   string
	}{
		{"affinity-states", "10.244.0.0/26", true, true, "198.18.0.1"},
		{"affinity-states", "10.244.0.64/26", false, false, ""},
		{"affinity-states", "10.244.0.128/26", false, false, ""},
		{"affinity-states", "10.244.1.0/26", false, false, ""},
		{"disable-bgp-export", "10.244.0.0/26", true, true, "198.18.0.1"},
		{"disable-bgp-export", "10.245.0.0/26", false, true, ""},
		{"most-specific-pool", "10.1.0.0/26", false, true, ""},
		{"most-specific-pool", "10.2.0.0/26", true, true, "198.18.0.1"},
		{"most-specific-pool", "172.17.0.0/26", true, true, "198.18.0.1"},
		{"most-specific-pool", "172.18.0.0/26", false, true, ""},
		{"most-specific-pool", "192.168.0.0/26", false, true, ""},
		{"dual-stack", "fd00:244::/122", true, true, "fd00:198:18::1"},
		{"dual-stack", "fd00:244::40/122", false, false, ""},
		{"ipv4-only-node", "fd00:244::/122", false, true, ""},
		{"services", "10.96.0.0/12", true, false, "198.18.0.1"},
		{"services", "198.19.200.0/24", true, false, "198.18.0.1"},
		{"services", "198.19.201.0/24", true, false, "198.18.0.1"},
		{"services", "fd00:96::/112", true, false, "fd00:198:18::1"},
		{"services-ipv6-only-node", "10.96.0.0/12", false, false, ""},
		{"services-ipv6-only-node", "fd00:96::/112", true, false, "fd00:198:18::1"},
	}
	for _, tt := range tests {
		t.Run(tt.input+"/"+tt.prefix, func(t *testing.T) {
			res, _ := Compute(find(tt.input))
			p := advertised(res, tt.prefix)
			if (p != nil) != tt.advertise {
				t.Fatalf("%s advertised=%v, want %v: %+v", tt.prefix, p != nil, tt.advertise, res.Paths)
			}
			if p != nil && p.NextHop.String() != tt.nextHop {
				t.Errorf("%s next hop %s, want %s", tt.prefix, p.NextHop, tt.nextHop)
			}
			if has(res.Blocks, tt.prefix) != tt.block || has(res.Blackholes, tt.prefix) != tt.block {
				t.Errorf("%s in blocks=%v blackholes=%v, want %v", tt.prefix, has(res.Blocks, tt.prefix), has(res.Blackholes, tt.prefix), tt.block)
			}
		})
	}

	t.Run("services-once", func(t *testing.T) {
		res, errs := Compute(find("services"))
		n := 0
		for _, p := range res.Paths {
			if p.Prefix == netip.MustParsePrefix("10.96.0.0/12") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("10.96.0.0/12 advertised %d times, want once", n)
		}
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), `service CIDR "198.19.300.0/24"`) {
			t.Errorf("errors = %v, want one naming service CIDR \"198.19.300.0/24\"", errs)
		}
	})

	t.Run("communities", func(t *testing.T) {
		res, errs := Compute(find("communities"))
		blk := advertised(res, "10.244.0.0/26")
		svc := advertised(res, "10.96.0.0/12")
		ext := advertised(res, "198.19.200.0/24")
		if blk == nil || svc == nil || ext == nil {
			t.Fatalf("missing paths: %+v", res.Paths)
		}
		std := func(a, b uint32) uint32 { return a<<16 | b }
		wantBlk := []uint32{std(65000, 100), std(65000, 200), std(65000, 999)}
		if !equalU32(blk.Communities, wantBlk) {
			t.Errorf("block communities %v, want %v", blk.Communities, wantBlk)
		}
		wantSvc := []uint32{std(65000, 999), std(65000, 100)}
		if !equalU32(svc.Communities, wantSvc) {
			t.Errorf("service communities %v, want %v", svc.Communities, wantSvc)
		}
		wantLarge := [][3]uint32{{4200000000, 1, 2}, {65000, 300, 400}}
		if len(svc.LargeCommunities) != 2 || svc.LargeCommunities[0] != wantLarge[0] || svc.LargeCommunities[1] != wantLarge[1] {
			t.Errorf("service large communities %v, want %v", svc.LargeCommunities, wantLarge)
		}
		if len(ext.Communities)+len(ext.LargeCommunities) != 0 {
			t.Errorf("198.19.200.0/24 has communities %v %v, want none", ext.Communities, ext.LargeCommunities)
		}
		wantErrs := []string{`community "70000:1"`, `community "not-a-community"`, `community "1:2:3:4"`, `prefixAdvertisements cidr "10.300.0.0/16"`}
		if len(errs) != len(wantErrs) {
			t.Fatalf("errors = %v, want %d", errs, len(wantErrs))
		}
		for i, w := range wantErrs {
			if !strings.Contains(errs[i].Error(), w) {
				t.Errorf("error %d = %q, want it to name %s", i, errs[i], w)
			}
		}
	})
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParseCommunity checks the community syntax.
func TestParseCommunity(t *testing.T) {
	tests := []struct {
		in    string
		std   uint32
		large *[3]uint32
		err   bool
	}{
		{in: "65000:100", std: 65000<<16 | 100},
		{in: "0:0", std: 0},
		{in: "65535:65535", std: 0xffffffff},
		{in: "65536:1", err: true},
		{in: "1:65536", err: true},
		{in: "4294967295:0:1", large: &[3]uint32{4294967295, 0, 1}},
		{in: "4294967296:0:1", err: true},
		{in: "65000", err: true},
		{in: "a:b", err: true},
		{in: "-1:2", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			std, large, err := ParseCommunity(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("ParseCommunity(%q) error = %v, want error %v", tt.in, err, tt.err)
			}
			if err != nil {
				return
			}
			if (large == nil) != (tt.large == nil) || (large != nil && *large != *tt.large) {
				t.Fatalf("ParseCommunity(%q) large = %v, want %v", tt.in, large, tt.large)
			}
			if large == nil && std != tt.std {
				t.Errorf("ParseCommunity(%q) = %#x, want %#x", tt.in, std, tt.std)
			}
		})
	}
}

// TestEqual checks Path.Equal sees every attribute (the reconciler
// re-advertises on any difference).
func TestEqual(t *testing.T) {
	base := Path{Prefix: netip.MustParsePrefix("10.0.0.0/26"), NextHop: v4, Kind: KindBlock, Communities: []uint32{1}, LargeCommunities: [][3]uint32{{1, 2, 3}}}
	mut := []func(*Path){
		func(p *Path) { p.Prefix = netip.MustParsePrefix("10.0.0.64/26") },
		func(p *Path) { p.NextHop = netip.MustParseAddr("198.18.0.2") },
		func(p *Path) { p.Kind = KindService },
		func(p *Path) { p.Communities = []uint32{2} },
		func(p *Path) { p.Communities = nil },
		func(p *Path) { p.LargeCommunities = [][3]uint32{{1, 2, 4}} },
		func(p *Path) { p.LargeCommunities = nil },
	}
	if !base.Equal(base) {
		t.Fatal("a path differs from itself")
	}
	for i, m := range mut {
		o := base
		o.Communities = append([]uint32(nil), base.Communities...)
		o.LargeCommunities = append([][3]uint32(nil), base.LargeCommunities...)
		m(&o)
		if base.Equal(o) {
			t.Errorf("mutation %d: %+v equals %+v", i, o, base)
		}
	}
}
