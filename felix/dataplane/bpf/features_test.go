package bpf

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestNoTCXFallback: featureDetectOverride TCX=false (a kernel without
// TCX, such as Debian 12's 6.1) makes every attachment a cls_bpf filter,
// whatever bpfAttachType says: a workload interface's two hooks and a
// data interface's hooks, with no TCX link; the pod is reached through
// them. Dropping the override moves them to TCX links, and putting it
// back to filters again.
func TestNoTCXFallback(t *testing.T) {
	td := newTestDriver(t)
	d := td.d
	configure := func(override string) {
		t.Helper()
		off := false
		d.OnConfigUpdate(calc.MergeConfig(&v3.FelixConfigurationSpec{IPv6Support: &off, BPFAttachType: "TCX", FeatureDetectOverride: override}, nil))
		applySettled(t, d)
	}
	configure("TCX=false")
	// A data interface (Calico's default bpfDataIfacePattern names eth*).
	data := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ethtst0"}, PeerName: "ethtst1"}
	if err := td.nodeH.LinkAdd(data); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ethtst0", "ethtst1"} {
		l, err := td.nodeH.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := td.nodeH.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	dl, err := td.nodeH.LinkByName("ethtst0")
	if err != nil {
		t.Fatal(err)
	}
	lo, err := td.nodeH.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := td.nodeH.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 0, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	const iface = "calitst2"
	addr := netip.MustParseAddr("10.80.0.7")
	_, idx := td.workload(t, iface, addr)
	ep := &calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w"}, InterfaceName: iface,
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(addr, 32)}, Profiles: []string{"kns.a"}}
	d.OnEndpointUpdate(ep)
	d.OnRouteUpdate(calc.Route{Dst: netip.PrefixFrom(addr, 32), Iface: iface})
	applySettled(t, d)

	dataProg := d.objs.EntryID[palbpf.KindData]
	check := func(when string, tc bool) {
		t.Helper()
		links, err := d.objs.Links()
		if err != nil {
			t.Fatal(err)
		}
		linked := func(idx int) [2]ebpf.ProgramID {
			var ids [2]ebpf.ProgramID
			for h := range 2 {
				if l := links[[2]int{idx, h}]; l != nil {
					ids[h] = l.Program
					l.Close()
				}
			}
			return ids
		}
		for _, c := range []struct {
			what string
			idx  int
			want [2]ebpf.ProgramID
		}{{"workload " + iface, idx, d.objs.EntryID[palbpf.KindWorkload]}, {"data interface ethtst0", dl.Attrs().Index, dataProg}} {
			filters, err := d.objs.TCPrograms(c.idx)
			if err != nil {
				t.Fatal(err)
			}
			lk, none := linked(c.idx), [2]ebpf.ProgramID{}
			if tc && (filters != c.want || lk != none) {
				t.Errorf("%s, %s: filters run %v, links %v; want %v as filters only", when, c.what, filters, lk, c.want)
			}
			if !tc && (filters != none || lk != c.want) {
				t.Errorf("%s, %s: filters run %v, links %v; want %v as links only", when, c.what, filters, lk, c.want)
			}
		}
		if err := nstest.ICMP(td.run, addr, 8, 0); err != nil {
			t.Errorf("%s: the node does not reach the pod: %v", when, err)
		}
	}
	if dataProg[palbpf.In] == 0 || dataProg[palbpf.Out] == 0 {
		t.Fatal("the data interface programs are not loaded")
	}
	check("TCX=false", true)
	configure("")
	check("detected (TCX)", false)
	configure("TCX=false")
	check("TCX=false again", true)
}
