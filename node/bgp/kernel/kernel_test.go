package kernel

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/node/bgp/internal/nstest"
)

// setup makes a namespace with eth0 198.18.0.1/24 and fd00:198::1/64 (a veth
// whose peer sits in a second namespace) and opens a handle inside it.
func setup(t testing.TB) (*nstest.Lab, string, *Handle) {
	lab := nstest.New(t)
	ns := lab.NS("k")
	other := lab.NS("o")
	lab.Run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", other)
	lab.Run("ip", "-n", ns, "addr", "add", "198.18.0.1/24", "dev", "eth0")
	lab.Run("ip", "-n", ns, "addr", "add", "fd00:198::1/64", "dev", "eth0", "nodad")
	lab.Run("ip", "-n", ns, "link", "set", "eth0", "up")
	lab.Run("ip", "-n", other, "link", "set", "eth0", "up")
	var h *Handle
	if err := nstest.Do(ns, func() (err error) { h, err = Open(0); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return lab, ns, h
}

// proto is our route protocol as ip(8) takes it.
var proto = strconv.Itoa(DefaultProtocol)

func mustRoute(dst string, hops ...string) Route {
	r := Route{Dst: netip.MustParsePrefix(dst)}
	for _, h := range hops {
		r.NextHops = append(r.NextHops, netip.MustParseAddr(h))
	}
	return r.Normalize()
}

// TestSync programs, reads back and repairs IPv4/IPv6, ECMP and blackhole
// routes, and checks other protocols' routes are left alone.
func TestSync(t *testing.T) {
	lab, ns, h := setup(t)
	// A felix-like workload route, an operator's route and FRR's static
	// route (FRR 8 names protocol 196 "static"), not ours.
	lab.Run("ip", "-n", ns, "route", "add", "10.244.1.5/32", "dev", "eth0", "proto", "80")
	lab.Run("ip", "-n", ns, "route", "add", "10.244.9.0/26", "via", "198.18.0.9", "proto", "4")
	lab.Run("ip", "-n", ns, "route", "add", "10.244.8.0/26", "via", "198.18.0.8", "proto", "196")
	// A stale route of ours from a "previous run".
	lab.Run("ip", "-n", ns, "route", "add", "10.244.7.0/26", "via", "198.18.0.7", "proto", proto)

	s := NewSyncer(h, nil)
	bh := Route{Dst: netip.MustParsePrefix("10.244.1.0/26"), Blackhole: true}
	st := s.Update([]Route{
		mustRoute("10.244.2.0/26", "198.18.0.2"),
		mustRoute("10.244.3.0/26", "198.18.0.3", "198.18.0.2"),
		mustRoute("fd00:244::/122", "fd00:198::2"),
		mustRoute("fd00:245::/122", "fd00:198::2", "fd00:198::3"),
		bh,
		mustRoute("10.244.1.5/32", "198.18.0.2"), // held by proto 80
		mustRoute("10.244.9.0/26", "198.18.0.3"), // held by static
	})
	if st.Added != 5 || st.Conflicts != 2 || len(st.Errors) != 0 {
		t.Fatalf("update: %v %v", st, st.Errors)
	}
	got, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{
		mustRoute("10.244.2.0/26", "198.18.0.2"), mustRoute("10.244.3.0/26", "198.18.0.2", "198.18.0.3"),
		mustRoute("fd00:244::/122", "fd00:198::2"), mustRoute("fd00:245::/122", "fd00:198::2", "fd00:198::3"),
		bh, mustRoute("10.244.7.0/26", "198.18.0.7"),
	}
	if len(got) != len(want) {
		t.Fatalf("read back %d routes, want %d: %v", len(got), len(want), got)
	}
	for _, w := range want {
		if !got[w.Dst].Equal(w) {
			t.Errorf("route %s: read back %+v, want %+v", w.Dst, got[w.Dst], w)
		}
	}
	// Outside tampering: delete one, change another; resync without
	// stale removal repairs both and keeps the old route.
	lab.Run("ip", "-n", ns, "route", "del", "10.244.2.0/26")
	lab.Run("ip", "-n", ns, "route", "replace", "10.244.3.0/26", "via", "198.18.0.4", "proto", proto)
	st, err = s.Resync(false)
	if err != nil || st.Added != 1 || st.Replaced != 1 || st.Deleted != 0 {
		t.Fatalf("resync: %v %v", st, err)
	}
	st, err = s.Resync(true)
	if err != nil || st.Deleted != 1 {
		t.Fatalf("resync removing stale: %v %v", st, err)
	}
	// Matched by number (iproute2 prints names where it has one).
	for _, c := range []struct{ proto, line string }{
		{"80", "10.244.1.5 dev eth0"}, {"4", "10.244.9.0/26 via 198.18.0.9 dev eth0"},
		{"196", "10.244.8.0/26 via 198.18.0.8 dev eth0"}, {proto, "blackhole 10.244.1.0/26"},
	} {
		if out := lab.Run("ip", "-n", ns, "route", "show", "proto", c.proto); !strings.Contains(out, c.line) {
			t.Errorf("kernel lost %q of protocol %s:\n%s", c.line, c.proto, out)
		}
	}
	if out := lab.Run("ip", "-n", ns, "route", "show"); strings.Contains(out, "10.244.7.0") {
		t.Errorf("stale route survived:\n%s", out)
	}
	// Withdraw: no next hops removes the route.
	s.Update([]Route{{Dst: netip.MustParsePrefix("10.244.3.0/26")}})
	if out := lab.Run("ip", "-n", ns, "route", "show", "10.244.3.0/26"); out != "" {
		t.Errorf("withdrawn route still there: %s", out)
	}
}

// manyRoutes returns n /32 routes in 10.64.0.0/10 via two gateways.
func manyRoutes(n int) []Route {
	out := make([]Route, n)
	for i := range out {
		a := netip.AddrFrom4([4]byte{10, 64 + byte(i>>16), byte(i >> 8), byte(i)})
		out[i] = Route{Dst: netip.PrefixFrom(a, 32), NextHops: []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(2 + i%2)})}}
	}
	return out
}

// ipBatch installs the same routes with `ip -batch` (the reference).
func ipBatch(b testing.TB, ns string, routes []Route, verb string) time.Duration {
	var sb strings.Builder
	for _, r := range routes {
		if verb == "del" {
			fmt.Fprintf(&sb, "route del %s proto %s\n", r.Dst, proto)
		} else {
			fmt.Fprintf(&sb, "route add %s via %s proto %s\n", r.Dst, r.NextHops[0], proto)
		}
	}
	f := filepath.Join(b.TempDir(), "batch")
	if err := os.WriteFile(f, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if out, err := exec.Command("ip", "-n", ns, "-batch", f).CombinedOutput(); err != nil {
		b.Fatalf("ip -batch: %v\n%s", err, out)
	}
	return time.Since(start)
}

// BenchmarkInstall measures routes/s installed by a Syncer against `ip
// -batch` of the same 65,536 routes, in the same namespace and run.
func BenchmarkInstall(b *testing.B) {
	_, ns, h := setup(b)
	routes := manyRoutes(65536)
	var ours, ref time.Duration
	for b.Loop() {
		s := NewSyncer(h, nil)
		start := time.Now()
		if st := s.Update(routes); st.Added != len(routes) {
			b.Fatalf("installed %v", st)
		}
		ours += time.Since(start)
		if st, err := s.Resync(true); err != nil || st.Read != len(routes) {
			b.Fatalf("read back %v %v", st, err)
		}
		del := make([]Route, len(routes))
		for i, r := range routes {
			del[i] = Route{Dst: r.Dst}
		}
		s.Update(del)
		ref += ipBatch(b, ns, routes, "add")
		ipBatch(b, ns, routes, "del")
	}
	n := float64(b.N * len(routes))
	b.ReportMetric(n/ours.Seconds(), "routes/s")
	b.ReportMetric(n/ref.Seconds(), "ref-routes/s")
	b.ReportMetric(ours.Seconds()/ref.Seconds(), "x/ref")
}

// BenchmarkResync measures a full resync (read back, diff, repair) of
// 65,536 routes, 1% of them damaged from outside, against `ip route show
// proto 201` merely listing them.
func BenchmarkResync(b *testing.B) {
	_, ns, h := setup(b)
	routes := manyRoutes(65536)
	s := NewSyncer(h, nil)
	if st := s.Update(routes); st.Added != len(routes) {
		b.Fatalf("installed %v", st)
	}
	damage := routes[:655]
	var ours, ref time.Duration
	for b.Loop() {
		b.StopTimer()
		if errs := h.Apply(func() []Op {
			ops := make([]Op, len(damage))
			for i, r := range damage {
				ops[i] = Op{Route: r, Delete: true}
			}
			return ops
		}()); len(errs) > 0 {
			b.Fatal(errs[0])
		}
		b.StartTimer()
		start := time.Now()
		st, err := s.Resync(true)
		ours += time.Since(start)
		if err != nil || st.Added != len(damage) {
			b.Fatalf("resync %v %v", st, err)
		}
		start = time.Now()
		if err := exec.Command("ip", "-n", ns, "route", "show", "proto", proto).Run(); err != nil {
			b.Fatal(err)
		}
		ref += time.Since(start)
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/resync")
	b.ReportMetric(ours.Seconds()/ref.Seconds(), "x/ref")
}
