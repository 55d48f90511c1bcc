package bgp

import (
	"context"
	"errors"
	"sync"

	"github.com/palisade-net/palisade/node/bgp/router"
)

// ErrNoSpeaker is returned by PeerTable.ListPeers while no BGP speaker runs
// (before the node has an address, or between restarts).
var ErrNoSpeaker = errors.New("the BGP speaker is not running yet")

// PeerTable gives the status API the running speaker's sessions. Pass one
// in Config.Peers; Run points it at each speaker it starts.
type PeerTable struct {
	mu sync.Mutex
	r  router.Router
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
