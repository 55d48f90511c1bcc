package bgp

import (
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/node/bgp/router"
)

// DefaultDownWarning is how long a session may be down before the node
// says so, unless configured.
const DefaultDownWarning = 10 * time.Second

// downWatch warns, once per outage, about each session that stays down
// for after, with the reason the speaker knows, and says when it is back.
type downWatch struct {
	after  time.Duration
	since  map[string]time.Time
	warned map[string]bool
}

func newDownWatch(after time.Duration) *downWatch {
	return &downWatch{after: after, since: map[string]time.Time{}, warned: map[string]bool{}}
}

// observe takes the current sessions.
func (d *downWatch) observe(l *log.Entry, ps []router.PeerState, now time.Time) {
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		k := p.Address.String()
		seen[k] = true
		if p.State == "Established" {
			if d.warned[k] {
				l.WithField("peer", k).Info("BGP session is up again")
			}
			delete(d.since, k)
			delete(d.warned, k)
			continue
		}
		if _, ok := d.since[k]; !ok {
			d.since[k] = now
		}
		if !d.warned[k] && now.Sub(d.since[k]) >= d.after {
			d.warned[k] = true
			reason := p.Reason
			if reason == "" {
				reason = "no connection has reached OpenSent"
			}
			l.WithFields(log.Fields{"peer": k, "state": p.State, "down": now.Sub(d.since[k]).Round(time.Second), "reason": reason}).
				Warn("BGP session is still down")
		}
	}
	for k := range d.since {
		if !seen[k] {
			delete(d.since, k)
			delete(d.warned, k)
		}
	}
}
