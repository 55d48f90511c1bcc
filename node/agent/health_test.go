package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// TestHealthLogsEachChangeOnce: a datastore that stops answering for many
// probes and comes back is logged twice in all, a warning when it is lost
// and an info line when it is back, and the status says which it is.
func TestHealthLogsEachChangeOnce(t *testing.T) {
	logger, hook := test.NewNullLogger()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := newHealth(log.NewEntry(logger), []string{"https://198.18.0.11:2379"}, start)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }

	h.observe(nil, at(1))
	if st := h.status(); !st.Reachable || !st.Since.Equal(start) || len(hook.AllEntries()) != 0 {
		t.Fatalf("answering: status %+v, log %d entries; want reachable since the start and nothing logged", st, len(hook.AllEntries()))
	}
	refused := errors.New("connection refused")
	for s := 2; s < 150; s++ {
		h.observe(refused, at(s))
	}
	timedOut := errors.New("context deadline exceeded")
	h.observe(timedOut, at(150))
	st := h.status()
	if st.Reachable || !st.Since.Equal(at(2)) || st.Error != timedOut.Error() {
		t.Errorf("during the outage: status %+v; want unreachable since %s with the last error", st, at(2))
	}
	for s := 151; s < 160; s++ {
		h.observe(nil, at(s))
	}
	st = h.status()
	if !st.Reachable || !st.Since.Equal(at(151)) || st.Error != "" {
		t.Errorf("after the outage: status %+v; want reachable since %s", st, at(151))
	}
	entries := hook.AllEntries()
	if len(entries) != 2 {
		t.Fatalf("logged %d lines, want 2 (lost, back): %v", len(entries), entries)
	}
	lost, back := entries[0], entries[1]
	if lost.Level != log.WarnLevel || !strings.Contains(lost.Message, "unreachable") || lost.Data[log.ErrorKey] != refused {
		t.Errorf("loss logged as %s %q %v; want a warning naming the first error", lost.Level, lost.Message, lost.Data)
	}
	if back.Level != log.InfoLevel || !strings.Contains(back.Message, "reachable again") || back.Data["unreachableFor"] != "2m29s" {
		t.Errorf("return logged as %s %q %v; want info with how long it was away (2m29s)", back.Level, back.Message, back.Data)
	}
}
