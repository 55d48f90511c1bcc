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

// TestIPNATsWarnedOnce: ipNATs are not acted on, and said so once per
// endpoint.
func TestIPNATsWarnedOnce(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	w := wep("ns", "a", testNode, "10.0.0.1", nil, func(w *v3.WorkloadEndpoint) {
		w.Spec.IPNATs = []v3.IPNAT{{InternalIP: "10.0.0.1", ExternalIP: "192.0.2.1"}}
	})
	g := NewGraph(testNode, newRecorder())
	g.OnUpdate(up(nsProfile("ns", nil)))
	g.OnUpdate(up(w))
	g.OnInSync()
	g.Flush()
	g.OnUpdate(up(w))
	g.Flush()
	n := 0
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "ipNATs") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d warnings about ipNATs, want 1", n)
	}
}
