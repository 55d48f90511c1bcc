package calc

import (
	"slices"
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
