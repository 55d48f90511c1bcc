package vxlan

import (
	"flag"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func vtep(node, tun, parent string, v int) calc.VTEP {
	return calc.VTEP{Node: node, TunnelAddr: netip.MustParseAddr(tun), MAC: calc.VTEPMAC(node, v), ParentAddr: netip.MustParseAddr(parent)}
}

// testOverlay is node1's overlay of a cluster in two subnets: node2 in its
// subnet (a CrossSubnet block direct, an Always block tunnelled), node3 in
// the other (tunnelled), IPv6 to node3.
func testOverlay() *calc.Overlay {
	l4, l6 := vtep("node1", "10.244.0.1", "198.18.0.11", 4), vtep("node1", "fd00:10:244::1", "fd00:198:18::11", 6)
	return &calc.Overlay{
		Local4: &l4, Local6: &l6, VXLAN4: true, VXLAN6: true,
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/26"), netip.MustParsePrefix("fd00:10:244::/122")},
		VTEPs: []calc.VTEP{
			vtep("node2", "10.244.1.1", "198.18.0.12", 4),
			vtep("node3", "10.244.2.1", "198.18.1.13", 4),
			vtep("node3", "fd00:10:244:2::1", "fd00:198:18:1::13", 6),
		},
		Routes: []calc.OverlayRoute{
			{Dst: netip.MustParsePrefix("10.244.1.0/26"), Node: "node2", Gateway: netip.MustParseAddr("198.18.0.12")},
			{Dst: netip.MustParsePrefix("10.244.2.0/26"), Node: "node3", Encap: true, Gateway: netip.MustParseAddr("10.244.2.1")},
			{Dst: netip.MustParsePrefix("10.245.1.0/26"), Node: "node2", Encap: true, Gateway: netip.MustParseAddr("10.244.1.1")},
			{Dst: netip.MustParsePrefix("fd00:10:244:2::/122"), Node: "node3", Encap: true, Gateway: netip.MustParseAddr("fd00:10:244:2::1")},
		},
	}
}

func testParams() Params {
	return Params{VNI: DefaultVNI, Port: DefaultPort, MTU4: 1450, MTU6: 1430, Parents: map[netip.Addr]string{
		netip.MustParseAddr("198.18.0.11"): "eth0", netip.MustParseAddr("fd00:198:18::11"): "eth0",
	}}
}

// TestDesiredGolden checks the kernel state computed for an overlay, as
// the iproute2 commands that would build it.
func TestDesiredGolden(t *testing.T) {
	off := false
	var out strings.Builder
	for _, c := range []struct {
		name string
		o    *calc.Overlay
		p    func(*Params)
	}{
		{"both families", testOverlay(), nil},
		{"no local VTEP: direct routes only", func() *calc.Overlay { o := testOverlay(); o.Local4, o.Local6 = nil, nil; return o }(), nil},
		{"vxlanEnabled false", testOverlay(), func(p *Params) { p.Enabled = &off }},
		{"VNI 5000, port 4790, MTU 1400", testOverlay(), func(p *Params) { p.VNI, p.Port, p.MTU4 = 5000, 4790, 1400 }},
		{"local blocks blackholed (no BGP)", testOverlay(), func(p *Params) { p.Blackholes = true }},
	} {
		p := testParams()
		if c.p != nil {
			c.p(&p)
		}
		out.WriteString("## " + c.name + "\n" + Desired(c.o, p).String())
	}
	golden.Check(t, filepath.Join("testdata", "desired.golden"), out.String(), *update)
}

// TestDiff checks the minimal delta: nothing between equal states, every
// item from scratch, only the damaged items after tampering, a device
// recreated (with all it holds) when its VNI differs.
func TestDiff(t *testing.T) {
	want := Desired(testOverlay(), testParams())
	if ops := Diff(want, want); !ops.Empty() {
		t.Fatalf("equal states: %+v", ops)
	}
	empty := State{V4: newFamily(), V6: newFamily()}
	// 2 devices, 3 neighbours, 3 FDB entries, 4 routes.
	if n := Diff(empty, want).Count(); n != 12 {
		t.Fatalf("from scratch: %d writes, want 12", n)
	}
	have := Desired(testOverlay(), testParams())
	delete(have.V4.Neighs, netip.MustParseAddr("10.244.2.1"))
	have.V4.Routes[netip.MustParsePrefix("10.99.0.0/24")] = Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), Dev: "eth0"}
	d := *have.V4.Device
	d.MTU = 1300
	have.V4.Device = &d
	ops := Diff(have, want)
	if ops.Count() != 3 || len(ops.SetNeigh) != 1 || len(ops.DelRoute) != 1 || len(ops.SetMTU) != 1 {
		t.Fatalf("tampered: %+v", ops)
	}
	have = Desired(testOverlay(), testParams())
	d = *have.V6.Device
	d.VNI = 7
	have.V6.Device = &d
	ops = Diff(have, want)
	// The v6 device again, its neighbour, FDB entry and route.
	if len(ops.DeleteDevice) != 1 || len(ops.CreateDevice) != 1 || ops.Count() != 5 {
		t.Fatalf("wrong VNI: %+v", ops)
	}
}
