package rules

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	goldenfile "github.com/palisade-net/palisade/libcalico/golden"
)

// TestBPFMode compares what the eBPF dataplane keeps in iptables with
// golden files: nat as the iptables dataplane's, the guard of workload
// interfaces in filter, nothing in raw and mangle.
func TestBPFMode(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   v3.FelixConfigurationSpec
		family int
	}{
		{"bpf-mode-v4", v3.FelixConfigurationSpec{}, 4},
		{"bpf-mode-v6", v3.FelixConfigurationSpec{}, 6},
		{"bpf-mode-accept-tap-v4", v3.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept", InterfacePrefix: "cali,tap"}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := BPFMode(Input{Config: calc.MergeConfig(&c.spec, nil), IPVersion: c.family}, 0x01000000, 0x5041)
			var b strings.Builder
			for _, table := range TableNames() {
				b.WriteString(rs.Restore(table, true))
			}
			if n := len(rs.Tables["raw"]) + len(rs.Tables["mangle"]); n != 0 {
				t.Errorf("%d chains in raw and mangle", n)
			}
			goldenfile.Check(t, filepath.Join("testdata", c.name+".golden"), b.String(), *update)
		})
	}
}
