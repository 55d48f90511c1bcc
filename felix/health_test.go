package felix

import (
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestHealthTimeoutOverrides: the main loop's liveness timeout is 90 s,
// healthTimeoutOverrides of InternalDataplaneMainLoop or CalculationGraph
// (the larger of the two) set it, 0 turns the check off, an unknown name
// is warned about, and removing the overrides restores the default.
func TestHealthTimeoutOverrides(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	h := newHealth(nil)
	start := time.Now()
	h.beat = start
	live := func(after time.Duration) bool { return h.live(start.Add(after)) == nil }
	if !live(89*time.Second) || live(91*time.Second) {
		t.Fatal("default: want live for 90 s only")
	}
	d := func(s string) v3.Duration { x, _ := time.ParseDuration(s); return v3.Duration{Duration: x} }
	h.setTimeouts([]v3.HealthTimeoutOverride{{Name: "InternalDataplaneMainLoop", Timeout: d("20s")}, {Name: "CalculationGraph", Timeout: d("30s")}, {Name: "Nonesuch", Timeout: d("1s")}}, log.NewEntry(logger))
	if !live(29*time.Second) || live(31*time.Second) {
		t.Error("overrides 20s and 30s: want live for 30 s only")
	}
	warned := false
	for _, e := range hook.AllEntries() {
		warned = warned || e.Level == log.WarnLevel && e.Data["name"] == "Nonesuch"
	}
	if !warned {
		t.Error("no warning naming the unknown reporter")
	}
	h.setTimeouts([]v3.HealthTimeoutOverride{{Name: "InternalDataplaneMainLoop", Timeout: d("0s")}}, log.NewEntry(logger))
	if !live(24 * time.Hour) {
		t.Error("timeout 0: want no liveness limit")
	}
	h.setTimeouts(nil, log.NewEntry(logger))
	if live(91 * time.Second) {
		t.Error("overrides removed: want the 90 s default back")
	}
}
