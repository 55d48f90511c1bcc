package gobgp

import (
	"context"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// Why sessions need help to come back quickly (read from GoBGP v3.37's
// fsm.go and server.go):
//
//   - After every failure a session waits in Idle for 5 s (holdtimeIdle;
//     only a brand-new neighbour's first Idle is immediate), and an Idle
//     session closes every connection the peer opens meanwhile.
//   - GoBGP has no collision detection: a session that already has a
//     connection closes any other the peer opens, and when both ends
//     connect at once each keeps its own and closes the other's, so both
//     fail and both go Idle for 5 s.
//   - Both ends failing together go Idle together and try again together:
//     after a node restarted, its peer is Idle (closing its connections)
//     exactly while it connects, and the other way round, round after
//     round, for tens of seconds to minutes.
//   - While a peer restarts, any failure of the session before it is
//     Established again makes GoBGP drop the peer's stale routes (the
//     graceful restart is given up), unless long-lived graceful restart is
//     negotiated, which keeps them.
//
// Palisade therefore (1) lets only one end of a session between two nodes
// connect (peers.Peer.Passive), so the ends never collide; (2) negotiates
// long-lived graceful restart between nodes, so a reconnection that fails
// part way keeps the routes; and (3) cuts the Idle wait after a session
// goes down to 1 s: a hard reset sets the wait of the next Idle to the
// neighbour's IdleHoldTimeAfterReset (1 s here) and an administrative down
// and up, which an Idle session handles without leaving Idle, restarts the
// running Idle timer with it. The reset's Cease is queued for a session
// that no longer exists and dropped when the session leaves Idle.

// nudgeGap keeps one state change reported twice from helping the same
// session twice. (A session that keeps failing is not helped into a tight
// loop: each round still waits 1 s in Idle and 1-2 s before it connects.)
const nudgeGap = 200 * time.Millisecond

// peerStates are the last states the watch saw, by neighbour address;
// a neighbour added again starts afresh.
type peerStates struct {
	mu   sync.Mutex
	last map[string]api.PeerState_SessionState
}

func (s *peerStates) forget(addr string) {
	s.mu.Lock()
	delete(s.last, addr)
	s.mu.Unlock()
}

// eorLog remembers which families each session's peer has sent
// End-of-RIB for since the session was last Established. GoBGP's own flag
// cannot tell: it also sets it, without any marker received, when both
// ends announced a restart ("peer has restarted, skipping wait for EOR"),
// which FRR does for a while after it starts.
type eorLog struct {
	mu   sync.Mutex
	seen map[string]map[string]bool
}

func (e *eorLog) received(addr, family string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen[addr] == nil {
		e.seen[addr] = map[string]bool{}
	}
	e.seen[addr][family] = true
}

func (e *eorLog) reset(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.seen, addr)
}

func (e *eorLog) has(addr, family string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[addr][family]
}

func familyKey(f *api.Family) string { return f.GetAfi().String() + "/" + f.GetSafi().String() }

// watchPeers follows GoBGP's session state changes and the End-of-RIB
// markers peers send; it cuts the Idle wait of each session that just
// went Idle.
func (r *Router) watchPeers(ctx context.Context) error {
	mu, last, nudged := &r.states.mu, r.states.last, map[string]time.Time{}
	req := &api.WatchEventRequest{
		Peer:  &api.WatchEventRequest_Peer{},
		Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_EOR}}},
	}
	return r.srv.WatchEvent(ctx, req, func(rsp *api.WatchEventResponse) {
		if t := rsp.GetTable(); t != nil {
			for _, p := range t.GetPaths() {
				if p.GetNeighborIp() != "" {
					r.eor.received(p.GetNeighborIp(), familyKey(p.GetFamily()))
				}
			}
			return
		}
		ev := rsp.GetPeer()
		if ev == nil || ev.GetType() != api.WatchEventResponse_PeerEvent_STATE {
			return
		}
		st := ev.GetPeer().GetState()
		addr := st.GetNeighborAddress()
		if st.GetSessionState() != api.PeerState_ESTABLISHED {
			r.eor.reset(addr)
		}
		mu.Lock()
		prev, known := last[addr]
		last[addr] = st.GetSessionState()
		// A new neighbour's first Idle ends at once by itself (and the
		// admin down would then find it Active, and send it back to
		// Idle): only a session that was somewhere else is helped.
		due := known && st.GetSessionState() == api.PeerState_IDLE && prev != api.PeerState_IDLE &&
			prev != api.PeerState_UNKNOWN && st.GetAdminState() == api.PeerState_UP && time.Since(nudged[addr]) > nudgeGap
		if due {
			nudged[addr] = time.Now()
		}
		mu.Unlock()
		if due {
			go r.nudge(ctx, addr)
		}
	})
}

// nudge brings a session that is Idle out of it after 1 s instead of 5.
func (r *Router) nudge(ctx context.Context, addr string) {
	l := r.log.WithField("peer", addr)
	if !r.idle(ctx, addr) {
		return
	}
	if err := r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr, Communication: "palisade: reconnecting"}); err != nil {
		l.WithError(err).Debug("Shortening the Idle wait: reset")
		return
	}
	if err := r.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: addr}); err != nil {
		l.WithError(err).Debug("Shortening the Idle wait: disable")
		return
	}
	// Enable only once the FSM has taken the disable (GoBGP drops an
	// admin change that finds the previous one still queued).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !r.adminDown(ctx, addr) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: addr}); err != nil {
		l.WithError(err).Warn("Re-enabling a BGP session after shortening its Idle wait")
		return
	}
	l.Debug("BGP session went down: trying again in a second")
}

// idle reports whether the session with addr is Idle and enabled.
func (r *Router) idle(ctx context.Context, addr string) bool {
	ok := false
	_ = r.srv.ListPeer(ctx, &api.ListPeerRequest{Address: addr}, func(p *api.Peer) {
		ok = p.GetState().GetSessionState() == api.PeerState_IDLE && p.GetState().GetAdminState() == api.PeerState_UP
	})
	return ok
}

// adminDown reports whether the session with addr is administratively
// down.
func (r *Router) adminDown(ctx context.Context, addr string) bool {
	down := false
	_ = r.srv.ListPeer(ctx, &api.ListPeerRequest{Address: addr}, func(p *api.Peer) {
		down = p.GetState().GetAdminState() != api.PeerState_UP
	})
	return down
}
