package calc

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestAllowSpoofedSourcePrefixesGated: a workload's
// allowSpoofedSourcePrefixes reach the dataplane only with
// workloadSourceSpoofing Any; otherwise they are left out and named in a
// warning, once. A change of the setting sends the endpoint again.
func TestAllowSpoofedSourcePrefixesGated(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "allowSpoofedSourcePrefixes ignored") {
				n++
			}
		}
		hook.Reset()
		return n
	}
	fc := func(spoofing string) Update {
		return up(&v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
			Spec: v3.FelixConfigurationSpec{WorkloadSourceSpoofing: spoofing}})
	}
	spoofer := wep("ns", "a", testNode, "10.0.0.1", nil, func(w *v3.WorkloadEndpoint) {
		w.Spec.AllowSpoofedSourcePrefixes = []string{"192.0.2.0/24", "bad", "2001:db8::/32"}
	})
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	g.OnUpdate(up(nsProfile("ns", nil)))
	g.OnUpdate(up(spoofer))
	g.OnInSync()
	g.Flush()
	id := wid("ns", "a")
	if got := rec.endpoints[id].AllowSpoofedSourcePrefixes; got != nil {
		t.Errorf("workloadSourceSpoofing unset: prefixes %v sent", got)
	}
	if n := warnings(); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
	g.OnUpdate(up(spoofer))
	g.OnUpdate(fc("Disabled"))
	g.Flush()
	if n := warnings(); n != 0 {
		t.Errorf("%d more warnings for the same endpoint, want none", n)
	}
	g.OnUpdate(fc("Any"))
	g.Flush()
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")}
	if got := rec.endpoints[id].AllowSpoofedSourcePrefixes; !slices.Equal(got, want) {
		t.Errorf("workloadSourceSpoofing Any: prefixes %v, want %v (the bad one left out)", got, want)
	}
	g.OnUpdate(fc(""))
	g.Flush()
	if got := rec.endpoints[id].AllowSpoofedSourcePrefixes; got != nil {
		t.Errorf("workloadSourceSpoofing unset again: prefixes %v still sent", got)
	}
}

// TestIPNATsGated: a workload's ipNATs reach the dataplane (iptables or
// eBPF) only with floatingIPs Enabled; otherwise they are left out and
// named in a warning once per endpoint, saying why. One whose internalIP
// is not the workload's is always left out.
func TestIPNATsGated(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	warnings := func(why string) int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "ipNATs (floating IPs) not programmed: "+why) {
				n++
			}
		}
		hook.Reset()
		return n
	}
	fc := func(floating string, bpf bool) Update {
		return up(&v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
			Spec: v3.FelixConfigurationSpec{FloatingIPs: floating, BPFEnabled: &bpf}})
	}
	w := wep("ns", "a", testNode, "10.0.0.1", nil, func(w *v3.WorkloadEndpoint) {
		w.Spec.IPNetworks = append(w.Spec.IPNetworks, "fd00::1/128")
		w.Spec.IPNATs = []v3.IPNAT{{InternalIP: "10.0.0.1", ExternalIP: "192.0.2.1"}, {InternalIP: "fd00::1", ExternalIP: "2001:db8::1"},
			{InternalIP: "10.0.0.2", ExternalIP: "192.0.2.2"}}
	})
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	g.OnUpdate(up(nsProfile("ns", nil)))
	g.OnUpdate(up(w))
	g.OnInSync()
	g.Flush()
	id := wid("ns", "a")
	if got := rec.endpoints[id].IPNATs; got != nil {
		t.Errorf("floatingIPs unset (Disabled): ipNATs %v sent", got)
	}
	if n := warnings("FelixConfiguration floatingIPs is Disabled"); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
	g.OnUpdate(up(w))
	g.Flush()
	if n := warnings(""); n != 0 {
		t.Errorf("%d more warnings for the same endpoint, want none", n)
	}
	g.OnUpdate(fc("Enabled", false))
	g.Flush()
	ap := netip.MustParseAddr
	want := []NAT{{ap("10.0.0.1"), ap("192.0.2.1")}, {ap("fd00::1"), ap("2001:db8::1")}}
	if got := rec.endpoints[id].IPNATs; !slices.Equal(got, want) {
		t.Errorf("floatingIPs Enabled: ipNATs %v, want %v (the one not the workload's left out)", got, want)
	}
	fipRoutes := func() (n int) {
		for _, p := range []string{"192.0.2.1/32", "2001:db8::1/128", "192.0.2.2/32"} {
			if _, ok := rec.routes[netip.MustParsePrefix(p)]; ok {
				n++
			}
		}
		return n
	}
	if rec.routes[netip.MustParsePrefix("192.0.2.1/32")] != w.Spec.InterfaceName || rec.routes[netip.MustParsePrefix("2001:db8::1/128")] != w.Spec.InterfaceName || fipRoutes() != 2 {
		t.Errorf("floatingIPs Enabled: routes %v, want the two floating IPs through %s", rec.routes, w.Spec.InterfaceName)
	}
	// The eBPF dataplane translates them too.
	g.OnUpdate(fc("Enabled", true))
	g.Flush()
	if got := rec.endpoints[id].IPNATs; !slices.Equal(got, want) || fipRoutes() != 2 {
		t.Errorf("eBPF dataplane: ipNATs %v sent, routes %v; want %v and their routes", got, rec.routes, want)
	}
	if n := warnings("not programmed"); n != 0 {
		t.Errorf("%d warnings on the eBPF dataplane, want none", n)
	}
	g.OnUpdate(fc("Disabled", false))
	g.Flush()
	if got := rec.endpoints[id].IPNATs; got != nil {
		t.Errorf("floatingIPs Disabled again: ipNATs %v still sent", got)
	}
}
