package felix

import (
	"strings"
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestUnusedFieldsWarnedOnce: felix's log names the FelixConfiguration
// fields it does not act on, once, and again when they change.
func TestUnusedFieldsWarnedOnce(t *testing.T) {
	out := &syncBuffer{}
	logger := log.New()
	logger.Out = out
	entry := log.NewEntry(logger)
	yes := true
	var u unusedFields
	u.warn(calc.MergeConfig(&v3.FelixConfigurationSpec{XDPEnabled: &yes, ChainInsertMode: "Append"}, nil), entry)
	u.warn(calc.MergeConfig(&v3.FelixConfigurationSpec{XDPEnabled: &yes, ChainInsertMode: "Insert"}, nil), entry)
	if n := strings.Count(out.since(0), "not acted on"); n != 1 || !strings.Contains(out.since(0), "fields=xdpEnabled") {
		t.Fatalf("want one warning naming xdpEnabled:\n%s", out.since(0))
	}
	mark := out.len()
	u.warn(calc.MergeConfig(&v3.FelixConfigurationSpec{BPFLogLevel: "Debug", XDPEnabled: &yes}, nil), entry)
	if got := out.since(mark); !strings.Contains(got, `fields="bpfLogLevel, xdpEnabled"`) {
		t.Errorf("want a new warning naming both:\n%s", got)
	}
	mark = out.len()
	u.warn(calc.MergeConfig(nil, nil), entry)
	u.warn(calc.MergeConfig(nil, nil), entry)
	if got := out.since(mark); got != "" {
		t.Errorf("nothing set: want no warning:\n%s", got)
	}
}
