package vxlan_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/felix/dataplane/vxlan"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// host is one node namespace with its overlay manager.
type host struct {
	ns  nstest.NS
	run *nsexec.Runner
	m   *vxlan.Manager
	mtu string // the MTU file
}

var (
	addrA  = netip.MustParseAddr("198.18.0.11")
	addrB  = netip.MustParseAddr("198.18.0.12")
	addr6A = netip.MustParseAddr("fd00:198:18::11")
	addr6B = netip.MustParseAddr("fd00:198:18::12")
	tunA   = netip.MustParseAddr("10.244.0.1")
	tunB   = netip.MustParseAddr("10.244.1.1")
	tun6A  = netip.MustParseAddr("fd00:10:244::1")
	tun6B  = netip.MustParseAddr("fd00:10:244:1::1")
)

// pair makes two node namespaces joined by a veth (eth0 on both, IPv4 and
// IPv6 addresses) and an overlay manager for each.
func pair(t *testing.T) (a, b *host) { return pairTB(t) }

func pairTB(t testing.TB) (a, b *host) {
	nstest.RequireRoot(t)
	prefix := nstest.Prefix()
	mk := func(name string, v4, v6 netip.Addr) *host {
		ns := nstest.New(t, prefix, name)
		run, err := nsexec.New(ns.Path())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { run.Close() })
		mtu := filepath.Join(t.TempDir(), "mtu")
		m, err := vxlan.New(run, nil, mtu)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return &host{ns: ns, run: run, m: m, mtu: mtu}
	}
	a, b = mk("a", addrA, addr6A), mk("b", addrB, addr6B)
	a.ns.MustRun(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b.ns.Name)
	for _, h := range []struct {
		h      *host
		v4, v6 netip.Addr
	}{{a, addrA, addr6A}, {b, addrB, addr6B}} {
		h.h.ns.MustRun(t, "ip", "addr", "add", h.v4.String()+"/24", "dev", "eth0")
		h.h.ns.MustRun(t, "ip", "addr", "add", h.v6.String()+"/64", "dev", "eth0", "nodad")
		h.h.ns.MustRun(t, "ip", "link", "set", "eth0", "up")
	}
	return a, b
}

// overlayFor is the overlay one node of the pair wants: its own VTEP,
// the other's, and routes to the other's blocks (through the tunnel, or
// direct when crossSubnet).
func overlayFor(self, other string, direct bool, v6 bool) *calc.Overlay {
	vtep := map[string]calc.VTEP{
		"a": {Node: "a", TunnelAddr: tunA, MAC: calc.VTEPMAC("a", 4), ParentAddr: addrA},
		"b": {Node: "b", TunnelAddr: tunB, MAC: calc.VTEPMAC("b", 4), ParentAddr: addrB},
	}
	vtep6 := map[string]calc.VTEP{
		"a": {Node: "a", TunnelAddr: tun6A, MAC: calc.VTEPMAC("a", 6), ParentAddr: addr6A},
		"b": {Node: "b", TunnelAddr: tun6B, MAC: calc.VTEPMAC("b", 6), ParentAddr: addr6B},
	}
	block := map[string]string{"a": "10.244.0.0/26", "b": "10.244.1.0/26"}
	block6 := map[string]string{"a": "fd00:10:244::/122", "b": "fd00:10:244:1::/122"}
	l := vtep[self]
	o := &calc.Overlay{Local4: &l, VTEPs: []calc.VTEP{vtep[other]}, VXLAN4: true}
	r := calc.OverlayRoute{Dst: netip.MustParsePrefix(block[other]), Node: other, Encap: true, Gateway: vtep[other].TunnelAddr}
	if direct {
		r.Encap, r.Gateway = false, vtep[other].ParentAddr
	}
	o.Routes = []calc.OverlayRoute{r}
	if v6 {
		l6 := vtep6[self]
		o.Local6, o.VXLAN6 = &l6, true
		o.VTEPs = append(o.VTEPs, vtep6[other])
		o.Routes = append(o.Routes, calc.OverlayRoute{Dst: netip.MustParsePrefix(block6[other]), Node: other, Encap: true, Gateway: vtep6[other].TunnelAddr})
	}
	return o
}

func apply(t *testing.T, h *host) {
	t.Helper()
	if err := h.m.Apply(context.Background()); err != nil {
		t.Fatalf("%s: apply: %v", h.ns.Name, err)
	}
}

// reach checks that a TCP connection from a to dst is made, from src.
func reach(t *testing.T, from, to *host, dst netip.Addr, wantSrc netip.Addr) {
	t.Helper()
	srv, err := nstest.Serve(to.run, 7000)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var got string
	for i := 0; i < 20; i++ { // the first probes may race the neighbour entries
		if got, err = nstest.TCP(from.run, dst, 7000); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no TCP from %s to %s: %v", from.ns.Name, dst, err)
	}
	if ap, perr := netip.ParseAddrPort(strings.TrimSpace(got)); perr != nil || ap.Addr().Unmap() != wantSrc {
		t.Fatalf("%s saw the probe from %q, want %s", to.ns.Name, got, wantSrc)
	}
}

// TestOverlayKernel programs the overlay from scratch in two namespaces,
// checks what the kernel holds (device, address, neighbour, FDB, onlink
// route of protocol 80), that traffic to the other node's block goes
// through the tunnel and a 1,400-byte packet with DF set crosses it, that
// a second apply writes nothing, and writes the pod MTU file.
func TestOverlayKernel(t *testing.T) {
	a, b := pair(t)
	oa := overlayFor("a", "b", false, false)
	oa.LocalBlocks = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/26")}
	a.m.Blackholes = true
	a.m.SetOverlay(oa)
	b.m.SetOverlay(overlayFor("b", "a", false, false))
	apply(t, a)
	apply(t, b)

	link := a.ns.MustRun(t, "ip", "-d", "link", "show", "vxlan.calico")
	for _, want := range []string{"mtu 1450", "vxlan id 4096", "local 198.18.0.11", "dev eth0", "dstport 4789", "nolearning", calc.VTEPMAC("a", 4), "state UNKNOWN"} {
		if !strings.Contains(link, want) {
			t.Errorf("vxlan.calico lacks %q:\n%s", want, link)
		}
	}
	checkContains(t, a.ns.MustRun(t, "ip", "addr", "show", "dev", "vxlan.calico"), "inet 10.244.0.1/32")
	checkContains(t, a.ns.MustRun(t, "ip", "neigh", "show", "dev", "vxlan.calico"), "10.244.1.1 lladdr "+calc.VTEPMAC("b", 4)+" PERMANENT")
	checkContains(t, a.ns.MustRun(t, "bridge", "fdb", "show", "dev", "vxlan.calico"), calc.VTEPMAC("b", 4)+" dst 198.18.0.12 self permanent")
	checkContains(t, a.ns.MustRun(t, "ip", "route", "show", "proto", "80"), "10.244.1.0/26 via 10.244.1.1 dev vxlan.calico onlink")
	checkContains(t, a.ns.MustRun(t, "ip", "route", "show", "proto", "80"), "blackhole 10.244.0.0/26")

	reach(t, a, b, tunB, tunA)
	if err := nstest.PingDF(a.run, tunB, 1400, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// 1,451 bytes do not fit the device.
	if err := nstest.PingDF(a.run, tunB, 1451, time.Second); err == nil {
		t.Fatal("a 1451-byte packet with DF crossed a 1450-byte tunnel")
	}

	apply(t, a)
	a.m.Resync()
	apply(t, a)
	if a.m.LastOps != 0 {
		t.Fatalf("a read-back of an unchanged kernel wrote %d times", a.m.LastOps)
	}
	if got, _ := os.ReadFile(a.mtu); string(got) != "1450" {
		t.Fatalf("pod MTU file holds %q, want 1450", got)
	}
}

func checkContains(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Errorf("want %q in:\n%s", want, out)
	}
}

// TestOverlayHeals tampers with everything the overlay owns, then reads
// back: exactly the damage is repaired and traffic flows again; a
// protocol-80 route nobody wants is removed, other routes stay.
func TestOverlayHeals(t *testing.T) {
	a, b := pair(t)
	a.m.SetOverlay(overlayFor("a", "b", false, false))
	b.m.SetOverlay(overlayFor("b", "a", false, false))
	apply(t, a)
	apply(t, b)
	reach(t, a, b, tunB, tunA)

	a.ns.MustRun(t, "ip", "neigh", "del", "10.244.1.1", "dev", "vxlan.calico")
	a.ns.MustRun(t, "bridge", "fdb", "del", calc.VTEPMAC("b", 4), "dev", "vxlan.calico", "dst", "198.18.0.12", "self")
	a.ns.MustRun(t, "ip", "route", "del", "10.244.1.0/26")
	a.ns.MustRun(t, "ip", "route", "add", "10.99.0.0/24", "dev", "eth0", "proto", "80")
	a.ns.MustRun(t, "ip", "route", "add", "10.98.0.0/24", "dev", "eth0")
	a.ns.MustRun(t, "ip", "link", "set", "vxlan.calico", "mtu", "1300")
	a.ns.MustRun(t, "ip", "addr", "add", "10.244.0.7/32", "dev", "vxlan.calico")
	a.m.Resync()
	apply(t, a)
	// neighbour, FDB, route, stray route, MTU, address.
	if a.m.LastOps != 6 {
		t.Fatalf("healing wrote %d times, want 6", a.m.LastOps)
	}
	routes := a.ns.MustRun(t, "ip", "route")
	if strings.Contains(routes, "10.99.0.0/24") || !strings.Contains(routes, "10.98.0.0/24") {
		t.Fatalf("stray protocol-80 route kept or another route removed:\n%s", routes)
	}
	checkContains(t, a.ns.MustRun(t, "ip", "link", "show", "vxlan.calico"), "mtu 1450")
	if out := a.ns.MustRun(t, "ip", "addr", "show", "dev", "vxlan.calico"); strings.Contains(out, "10.244.0.7") {
		t.Fatalf("stray address kept:\n%s", out)
	}
	reach(t, a, b, tunB, tunA)

	// A device of the name that is not ours as wanted (another VNI) is
	// replaced; one set down comes up.
	a.ns.MustRun(t, "ip", "link", "del", "vxlan.calico")
	a.ns.MustRun(t, "ip", "link", "add", "vxlan.calico", "type", "vxlan", "id", "7", "dstport", "4789", "dev", "eth0")
	a.m.Resync()
	apply(t, a)
	checkContains(t, a.ns.MustRun(t, "ip", "-d", "link", "show", "vxlan.calico"), "vxlan id 4096")
	reach(t, a, b, tunB, tunA)
	a.ns.MustRun(t, "ip", "link", "set", "vxlan.calico", "down")
	a.m.Resync()
	apply(t, a)
	reach(t, a, b, tunB, tunA)
}

// TestOverlayModes covers CrossSubnet (a same-subnet node's block routed
// straight over eth0, no tunnel used), vxlanEnabled false (no device, no
// routes), a configured VNI, port and MTU, and turning the overlay off.
func TestOverlayModes(t *testing.T) {
	a, b := pair(t)
	a.m.SetOverlay(overlayFor("a", "b", true, false))
	b.m.SetOverlay(overlayFor("b", "a", true, false))
	apply(t, a)
	apply(t, b)
	checkContains(t, a.ns.MustRun(t, "ip", "route", "show", "proto", "80"), "10.244.1.0/26 via 198.18.0.12 dev eth0")
	// A pod address of b's block, on b's loopback, answers from it.
	b.ns.MustRun(t, "ip", "addr", "add", "10.244.1.9/32", "dev", "lo")
	reach(t, a, b, netip.MustParseAddr("10.244.1.9"), addrA)

	vni, port, mtu := 5000, 4790, 1400
	for _, h := range []*host{a, b} {
		h.m.SetConfig(v3.FelixConfigurationSpec{VXLANVNI: &vni, VXLANPort: &port, VXLANMTU: &mtu})
		h.m.SetOverlay(overlayFor(map[*host]string{a: "a", b: "b"}[h], map[*host]string{a: "b", b: "a"}[h], false, false))
		apply(t, h)
	}
	link := a.ns.MustRun(t, "ip", "-d", "link", "show", "vxlan.calico")
	for _, want := range []string{"mtu 1400", "vxlan id 5000", "dstport 4790"} {
		checkContains(t, link, want)
	}
	reach(t, a, b, tunB, tunA)
	if got, _ := os.ReadFile(a.mtu); string(got) != "1400" {
		t.Fatalf("pod MTU file holds %q, want 1400 (vxlanMTU)", got)
	}

	off := false
	a.m.SetConfig(v3.FelixConfigurationSpec{VXLANEnabled: &off})
	apply(t, a)
	if out, err := a.ns.Run("ip", "link", "show", "vxlan.calico"); err == nil {
		t.Fatalf("vxlanEnabled false kept the device:\n%s", out)
	}
	if out := a.ns.MustRun(t, "ip", "route", "show", "proto", "80"); strings.TrimSpace(out) != "" {
		t.Fatalf("vxlanEnabled false kept routes:\n%s", out)
	}
	if got, _ := os.ReadFile(a.mtu); string(got) != "1500" {
		t.Fatalf("pod MTU file holds %q with the overlay off, want the host MTU 1500", got)
	}
}

// TestOverlayIPv6 runs the IPv6 overlay beside the IPv4 one:
// vxlan-v6.calico (MTU 1430) with its own neighbour and FDB entries and
// routes over an IPv6 underlay.
func TestOverlayIPv6(t *testing.T) {
	a, b := pair(t)
	oa := overlayFor("a", "b", false, true)
	oa.LocalBlocks = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/26"), netip.MustParsePrefix("fd00:10:244::/122")}
	a.m.Blackholes = true
	a.m.SetOverlay(oa)
	b.m.SetOverlay(overlayFor("b", "a", false, true))
	apply(t, a)
	apply(t, b)
	checkContains(t, a.ns.MustRun(t, "ip", "-6", "route", "show", "proto", "80"), "blackhole fd00:10:244::/122")
	a.m.Resync()
	apply(t, a)
	if a.m.LastOps != 0 {
		t.Fatalf("a read-back of an unchanged dual-stack kernel wrote %d times", a.m.LastOps)
	}
	link := a.ns.MustRun(t, "ip", "-d", "link", "show", "vxlan-v6.calico")
	for _, want := range []string{"mtu 1430", "vxlan id 4096", "local fd00:198:18::11", calc.VTEPMAC("a", 6)} {
		checkContains(t, link, want)
	}
	checkContains(t, a.ns.MustRun(t, "ip", "-6", "neigh", "show", "dev", "vxlan-v6.calico"), "fd00:10:244:1::1 lladdr "+calc.VTEPMAC("b", 6)+" PERMANENT")
	checkContains(t, a.ns.MustRun(t, "bridge", "fdb", "show", "dev", "vxlan-v6.calico"), "dst fd00:198:18::12 self permanent")
	checkContains(t, a.ns.MustRun(t, "ip", "-6", "route", "show", "proto", "80"), "fd00:10:244:1::/122 via fd00:10:244:1::1 dev vxlan-v6.calico")
	reach(t, a, b, tun6B, tun6A)
	reach(t, a, b, tunB, tunA)
	if got, _ := os.ReadFile(a.mtu); string(got) != "1430" {
		t.Fatalf("pod MTU file holds %q, want 1430 (IPv6 VXLAN)", got)
	}
}

// TestIPIPWarning: a pool asking for IP-in-IP is named in a warning, once,
// saying IP-in-IP is not supported on this kernel (which has no ipip link
// type) — or, on a kernel that has one, that Palisade does not build it;
// the probe leaves no link behind.
func TestIPIPWarning(t *testing.T) {
	a, _ := pair(t)
	logger, hook := logtest.NewNullLogger()
	m, err := vxlan.New(a.run, log.NewEntry(logger), "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	o := overlayFor("a", "b", false, false)
	o.IPIPPools = []string{"ipip-pool"}
	m.SetOverlay(o)
	if err := m.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.SetOverlay(o)
	if err := m.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, _ := nstest.Handle(t, a.ns)
	want := "not supported on this kernel"
	if vxlan.IPIPSupported(h) {
		want = "Palisade does not build"
	}
	var warned []string
	for _, e := range hook.AllEntries() {
		if e.Level == log.WarnLevel {
			warned = append(warned, e.Message+" "+fmt.Sprint(e.Data["ippool"]))
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], want) || !strings.Contains(warned[0], "ipip-pool") {
		t.Fatalf("warnings %q, want one naming ipip-pool and saying %q", warned, want)
	}
	if out := a.ns.MustRun(t, "ip", "link", "show"); strings.Contains(out, "plipipprobe") {
		t.Fatalf("the IP-in-IP probe link was left behind:\n%s", out)
	}
}
