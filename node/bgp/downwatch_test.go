package bgp

import (
	"net/netip"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/palisade-net/palisade/node/bgp/router"
)

// TestDownWatch: a session down for a while is warned about once, with
// its reason; once up again that is said; a session that comes back in
// time is never mentioned.
func TestDownWatch(t *testing.T) {
	logger, hook := test.NewNullLogger()
	l := log.NewEntry(logger)
	d := newDownWatch(DefaultDownWarning)
	a, b := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	down := []router.PeerState{{Address: a, State: "Active", Reason: "Local error: setting the TCP MD5 password on the BGP listener: protocol not available"}, {Address: b, State: "Idle"}}
	for s := 0; s <= 15; s++ {
		d.observe(l, down, t0.Add(time.Duration(s)*time.Second))
		if s == 5 {
			down[1].State = "Established"
		}
	}
	var warned []*log.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == log.WarnLevel {
			warned = append(warned, e)
		}
	}
	if len(warned) != 1 || warned[0].Data["peer"] != a.String() || warned[0].Data["reason"] != down[0].Reason || warned[0].Data["state"] != "Active" {
		t.Fatalf("warnings: %+v; want one, for %s with its reason", hook.AllEntries(), a)
	}
	hook.Reset()
	down[0].State = "Established"
	d.observe(l, down, t0.Add(20*time.Second))
	if e := hook.LastEntry(); e == nil || e.Level != log.InfoLevel || e.Message != "BGP session is up again" {
		t.Errorf("after the session came back: %+v", hook.AllEntries())
	}
}
