package calc

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestMergeConfigLogAndExclude: logSeverityScreen and interfaceExclude take
// Calico's defaults, the global value, then the node's override.
func TestMergeConfigLogAndExclude(t *testing.T) {
	for _, tc := range []struct {
		name         string
		global, node *v3.FelixConfigurationSpec
		wantExclude  []string
		wantSeverity string
	}{
		{"defaults", nil, nil, []string{"kube-ipvs0"}, "Info"},
		{"global", &v3.FelixConfigurationSpec{InterfaceExclude: "kube-ipvs0, /^veth-x[0-9]+$/ ,eth9", LogSeverityScreen: "Debug"}, nil,
			[]string{"kube-ipvs0", "/^veth-x[0-9]+$/", "eth9"}, "Debug"},
		{"node overrides", &v3.FelixConfigurationSpec{InterfaceExclude: "eth9", LogSeverityScreen: "Debug"},
			&v3.FelixConfigurationSpec{InterfaceExclude: "/^kube-/", LogSeverityScreen: "Warning"}, []string{"/^kube-/"}, "Warning"},
		{"node leaves global", &v3.FelixConfigurationSpec{InterfaceExclude: "eth9", LogSeverityScreen: "Error"},
			&v3.FelixConfigurationSpec{ChainInsertMode: "Append"}, []string{"eth9"}, "Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := MergeConfig(tc.global, tc.node)
			if !slices.Equal(c.InterfaceExclude, tc.wantExclude) {
				t.Errorf("InterfaceExclude = %q, want %q", c.InterfaceExclude, tc.wantExclude)
			}
			if c.LogSeverityScreen != tc.wantSeverity {
				t.Errorf("LogSeverityScreen = %q, want %q", c.LogSeverityScreen, tc.wantSeverity)
			}
		})
	}
}

// TestFailsafeDefaultsAndNets: the default failsafe ports are Calico's
// current ones, and a configured port keeps its net.
func TestFailsafeDefaultsAndNets(t *testing.T) {
	str := func(ps []ProtoPort) string {
		var out []string
		for _, p := range ps {
			s := fmt.Sprintf("%s:%d", p.Protocol, p.Port)
			if p.Net.IsValid() {
				s += "@" + p.Net.String()
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	}
	c := MergeConfig(nil, nil)
	// Calico's FailsafeInboundHostPorts / FailsafeOutboundHostPorts defaults.
	if got, want := str(c.FailsafeInbound), "tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667"; got != want {
		t.Errorf("inbound %s, want %s", got, want)
	}
	if got, want := str(c.FailsafeOutbound), "udp:53,udp:67,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667"; got != want {
		t.Errorf("outbound %s, want %s", got, want)
	}
	c = MergeConfig(&v3.FelixConfigurationSpec{
		FailsafeInboundHostPorts:  &[]v3.ProtoPort{{Protocol: "TCP", Port: 22, Net: "198.18.0.0/24"}, {Port: 80, Net: "not-a-net"}, {Protocol: "UDP", Port: 68}},
		FailsafeOutboundHostPorts: &[]v3.ProtoPort{{Protocol: "TCP", Port: 2379, Net: "198.18.0.10"}},
	}, nil)
	if got, want := str(c.FailsafeInbound), "tcp:22@198.18.0.0/24,udp:68"; got != want {
		t.Errorf("inbound %s, want %s (a bad net leaves its port out)", got, want)
	}
	if got, want := str(c.FailsafeOutbound), "tcp:2379@198.18.0.10/32"; got != want {
		t.Errorf("outbound %s, want %s", got, want)
	}
}

// TestNotActedOn: every set field felix does not act on is named, and
// none it does act on.
func TestNotActedOn(t *testing.T) {
	yes, mask := true, uint32(0xff000000)
	c := MergeConfig(&v3.FelixConfigurationSpec{
		BPFEnabled: &yes, IPIPEnabled: &yes, VXLANEnabled: &yes, HealthPort: func() *int { p := 9099; return &p }(), NFTablesMode: "Enabled",
		IptablesFilterDenyAction: "Reject", IptablesMarkMask: &mask, WorkloadSourceSpoofing: "Any", LogSeverityScreen: "Debug",
	}, &v3.FelixConfigurationSpec{PrometheusMetricsEnabled: &yes, PrometheusWireGuardMetricsEnabled: &yes, FailsafeInboundHostPorts: &[]v3.ProtoPort{}})
	if got, want := strings.Join(c.NotActedOn(), ","), "ipipEnabled,nftablesMode,prometheusWireGuardMetricsEnabled"; got != want {
		t.Errorf("NotActedOn = %s, want %s", got, want)
	}
	if got := MergeConfig(nil, nil).NotActedOn(); len(got) != 0 {
		t.Errorf("defaults: NotActedOn = %v, want none", got)
	}
	// A FelixConfiguration as Calico's client stores it carries defaults
	// (nftablesMode Auto, bpfConnectTimeLoadBalancing TCP, ...) that
	// nobody asked for: they are not named.
	stored := &v3.FelixConfiguration{}
	v3.Default(stored)
	if got := MergeConfig(&stored.Spec, nil).NotActedOn(); len(got) != 0 {
		t.Errorf("stored defaults: NotActedOn = %v, want none", got)
	}
}

// TestIptablesActionsAndMask: Calico's values in any case; an unknown
// value or a mask of fewer than four bits keeps the default.
func TestIptablesActionsAndMask(t *testing.T) {
	m := func(v uint32) *uint32 { return &v }
	c := MergeConfig(&v3.FelixConfigurationSpec{IptablesFilterAllowAction: "return", IptablesMangleAllowAction: "RETURN",
		IptablesFilterDenyAction: "reject", IptablesMarkMask: m(0xff000000)}, nil)
	if c.IptablesFilterAllowAction != "Return" || c.IptablesMangleAllowAction != "Return" || c.IptablesFilterDenyAction != "Reject" || c.IptablesMarkMask != 0xff000000 {
		t.Errorf("got %s %s %s %#x", c.IptablesFilterAllowAction, c.IptablesMangleAllowAction, c.IptablesFilterDenyAction, c.IptablesMarkMask)
	}
	c = MergeConfig(&v3.FelixConfigurationSpec{IptablesFilterDenyAction: "Explode", IptablesMarkMask: m(0x7)}, nil)
	if c.IptablesFilterDenyAction != "Drop" || c.IptablesMarkMask != DefaultMarkMask {
		t.Errorf("got %s %#x, want Drop and the default mask", c.IptablesFilterDenyAction, c.IptablesMarkMask)
	}
}

// featureDetectOverride: TCX and the NAT features forced on or off, an
// empty value left to detection, unknown features and values left out.
func TestFeatureOverrides(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]bool
	}{
		{"", map[string]bool{}},
		{"TCX=false", map[string]bool{"TCX": false}},
		{"TCX=true,MASQFullyRandom=false", map[string]bool{"TCX": true, "MASQFullyRandom": false}},
		{"TCX=", map[string]bool{}},
		{"TCX=maybe,BPFConnectTimeLB=false", map[string]bool{}},
	} {
		got := MergeConfig(&v3.FelixConfigurationSpec{FeatureDetectOverride: c.in}, nil).Features
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("featureDetectOverride %q: features %v, want %v", c.in, got, c.want)
		}
	}
}

// TestWireguardTables: the route tables Calico's felix gives WireGuard,
// the two lowest indexes of routeTableRanges (else routeTableRange, else
// 1-250) outside the kernel's 253-255, with wireguardRoutingRulePriority.
func TestWireguardTables(t *testing.T) {
	r := func(rs ...[2]int) *[]v3.RouteTableIDRange {
		out := []v3.RouteTableIDRange{}
		for _, x := range rs {
			out = append(out, v3.RouteTableIDRange{Min: x[0], Max: x[1]})
		}
		return &out
	}
	prio := 123
	for _, c := range []struct {
		name   string
		spec   v3.FelixConfigurationSpec
		tables [2]int
		prio   int
	}{
		{"defaults", v3.FelixConfigurationSpec{}, [2]int{1, 2}, 99},
		{"ranges", v3.FelixConfigurationSpec{RouteTableRanges: r([2]int{100, 200})}, [2]int{100, 101}, 99},
		{"lowest range first", v3.FelixConfigurationSpec{RouteTableRanges: r([2]int{300, 400}, [2]int{20, 20})}, [2]int{20, 300}, 99},
		{"overlapping ranges", v3.FelixConfigurationSpec{RouteTableRanges: r([2]int{5, 6}, [2]int{5, 9})}, [2]int{5, 6}, 99},
		{"the kernel's tables left out", v3.FelixConfigurationSpec{RouteTableRanges: r([2]int{252, 1000})}, [2]int{252, 256}, 99},
		{"deprecated range", v3.FelixConfigurationSpec{RouteTableRange: &v3.RouteTableRange{Min: 50, Max: 60}}, [2]int{50, 51}, 99},
		{"ranges win over range", v3.FelixConfigurationSpec{RouteTableRange: &v3.RouteTableRange{Min: 50, Max: 60}, RouteTableRanges: r([2]int{70, 80})}, [2]int{70, 71}, 99},
		{"one index only", v3.FelixConfigurationSpec{RouteTableRanges: r([2]int{253, 255}, [2]int{9, 9})}, [2]int{9, 0}, 99},
		{"rule priority", v3.FelixConfigurationSpec{WireguardRoutingRulePriority: &prio}, [2]int{1, 2}, 123},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := MergeConfig(&c.spec, nil)
			if cfg.WireguardTables != c.tables || cfg.WireguardRulePriority != c.prio {
				t.Errorf("tables %v priority %d, want %v %d", cfg.WireguardTables, cfg.WireguardRulePriority, c.tables, c.prio)
			}
		})
	}
}
