package bgp

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/palisade-net/palisade/node/bgp/kernel"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// ErrNoSpeaker is returned by PeerTable.ListPeers while no BGP speaker runs
// (before the node has an address, or between restarts).
var ErrNoSpeaker = errors.New("the BGP speaker is not running yet")

// PeerTable gives the status API the running speaker's sessions. Pass one
// in Config.Peers; Run points it at each speaker it starts.
type PeerTable struct {
	mu     sync.Mutex
	r      router.Router
	routes *kernel.Syncer
	// updates is, per peer address, the UPDATE count last seen and when
	// it last changed (the session's start when first seen).
	updates map[string]updateSeen
}

type updateSeen struct {
	count uint64
	at    time.Time
}

// ListPeersAdvertised is ListPeers with the prefixes sent to each peer
// counted (a walk of each peer's table).
func (t *PeerTable) ListPeersAdvertised(ctx context.Context) ([]router.PeerState, error) {
	t.mu.Lock()
	r := t.r
	t.mu.Unlock()
	if r == nil {
		return nil, ErrNoSpeaker
	}
	ps, err := r.ListPeersAdvertised(ctx)
	if err == nil {
		t.observe(ps, time.Now())
	}
	return ps, err
}

// observe notes, per peer, when its UPDATE count last changed.
func (t *PeerTable) observe(ps []router.PeerState, now time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[string]updateSeen, len(ps))
	for _, p := range ps {
		k := p.Address.String()
		old, ok := t.updates[k]
		switch {
		case !ok || p.UpdatesReceived < old.count:
			// New, or a new session: its updates came after it started.
			at := p.Since
			if at.IsZero() || p.UpdatesReceived == 0 {
				at = now
			}
			seen[k] = updateSeen{count: p.UpdatesReceived, at: at}
		case p.UpdatesReceived > old.count:
			seen[k] = updateSeen{count: p.UpdatesReceived, at: now}
		default:
			seen[k] = old
		}
	}
	t.updates = seen
}

// LastUpdate is when an UPDATE from the peer at addr was last seen
// arriving (to within the speaker's poll interval); false when it sent
// none in the session or is unknown.
func (t *PeerTable) LastUpdate(addr string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.updates[addr]
	return u.at, ok && u.count > 0
}

// Routes counts the routes BGP wants in the kernel and those programmed;
// false while kernel routes are not written (none wanted yet).
func (t *PeerTable) Routes() (wanted, programmed int, ok bool) {
	t.mu.Lock()
	s := t.routes
	t.mu.Unlock()
	if s == nil {
		return 0, 0, false
	}
	wanted, programmed = s.Programmed()
	return wanted, programmed, true
}

// setRoutes gives the table the kernel route syncer.
func (t *PeerTable) setRoutes(s *kernel.Syncer) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.routes = s
	t.mu.Unlock()
}

// ListPeers returns the sessions of the running speaker.
func (t *PeerTable) ListPeers(ctx context.Context) ([]router.PeerState, error) {
	t.mu.Lock()
	r := t.r
	t.mu.Unlock()
	if r == nil {
		return nil, ErrNoSpeaker
	}
	return r.ListPeers(ctx)
}

// set points the table at r (nil when the speaker stops).
func (t *PeerTable) set(r router.Router) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.r = r
	t.mu.Unlock()
}
