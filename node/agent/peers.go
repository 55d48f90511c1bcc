package agent

import (
	"context"
	"errors"
	"time"

	"github.com/palisade-net/palisade/node/bgp"
	"github.com/palisade-net/palisade/node/bgp/router"
	"github.com/palisade-net/palisade/node/status"
)

// bgpPeerLister turns the BGP speaker's sessions into the rows of
// `calicoctl node status`, in the words BIRD gives Calico: state "up" for
// an established session and "start" while it is being set up, the FSM
// state as info, followed for a session that is down by why (as BIRD's
// "Active Socket: Connection refused").
type bgpPeerLister struct {
	table *bgp.PeerTable
}

func (l bgpPeerLister) ListPeers(ctx context.Context) ([]status.PeerStatus, error) {
	states, err := l.table.ListPeers(ctx)
	if errors.Is(err, bgp.ErrNoSpeaker) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]status.PeerStatus, 0, len(states))
	for _, p := range states {
		out = append(out, peerRow(p, now))
	}
	return out, nil
}

// peerRow is one session as a row of the peer table.
func peerRow(p router.PeerState, now time.Time) status.PeerStatus {
	st, info := "start", p.State
	if p.State == "Established" {
		st = "up"
	} else if p.Reason != "" {
		info += " " + p.Reason
	}
	return status.PeerStatus{
		Address: p.Address.String(),
		Type:    p.Description,
		State:   st,
		Since:   status.FormatSince(p.Since, now),
		Info:    info,
		IPv6:    p.Address.Is6(),
	}
}
