// Package router defines the one small interface the BGP reconciler drives,
// with neutral types, so GoBGP (or anything else) sits behind one adapter.
package router

import (
	"context"
	"net/netip"
	"time"

	"github.com/palisade-net/palisade/node/bgp/paths"
	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/routepolicy"
)

// Global is the speaker's own configuration.
type Global struct {
	AS       uint32
	RouterID netip.Addr
	// ListenPort is the BGP port; 0 means 179, negative means do not
	// listen (outgoing sessions only).
	ListenPort int32
	// ListenAddresses restricts the listeners; empty means all.
	ListenAddresses []string
	// Policy is the route policy in place before the first session.
	Policy routepolicy.Policy
	// Restarting says this speaker restarted while its peers kept its
	// routes (graceful restart, restarting side): the restart flag is
	// announced and updates are deferred until the peers' End-of-RIB.
	Restarting bool
}

// PeerState is the observed state of one session.
type PeerState struct {
	Address netip.Addr
	Port    uint16
	AS      uint32
	// Description carries the session type (peers.Type) given at AddPeer.
	Description string
	// State is the BGP FSM state: Idle, Connect, Active, OpenSent,
	// OpenConfirm or Established.
	State string
	// Reason says why a session that is not Established is down, when
	// known: a local error that keeps it down ("Local error: …") or the
	// last reason it went down.
	Reason string `json:",omitempty"`
	// Since is when the session entered its current up/down state; zero
	// when unknown.
	Since time.Time
	// Received and Accepted count the prefixes learned from the peer.
	Received, Accepted uint64
	// Advertised counts the prefixes sent to the peer (ListPeersAdvertised
	// only: counting them walks the peer's table).
	Advertised uint64
	// UpdatesReceived counts the UPDATE messages received in the session.
	UpdatesReceived uint64
	// EndOfRIB is true once the peer has sent End-of-RIB for every family
	// of the session, when it announced graceful restart at all (whatever
	// families its capability lists); always for a peer that did not,
	// which may never send the marker.
	EndOfRIB bool
}

// Route is the set of best (equal-cost) next hops the speaker has learned
// for a prefix. No next hops means the prefix is gone.
type Route struct {
	Prefix   netip.Prefix
	NextHops []netip.Addr
}

// Router is a BGP speaker.
type Router interface {
	// Start starts the speaker; it must be called once before the others.
	Start(ctx context.Context, g Global) error
	// Stop shuts the speaker down (sessions are closed without waiting).
	Stop(ctx context.Context) error
	// Leave stops the speaker's own work but leaves its sessions to end
	// with the process, as a crash would, so peers keep this node's routes
	// (graceful restart) while it restarts.
	Leave()
	// Converged says a restart is over: sessions added from now on do
	// not announce one.
	Converged()
	AddPeer(ctx context.Context, p peers.Peer) error
	UpdatePeer(ctx context.Context, p peers.Peer) error
	DeletePeer(ctx context.Context, p peers.Peer) error
	AdvertisePath(ctx context.Context, p paths.Path) error
	WithdrawPath(ctx context.Context, p paths.Path) error
	// SetPolicy replaces what is sent to and taken from the peers.
	SetPolicy(ctx context.Context, p routepolicy.Policy) error
	ListPeers(ctx context.Context) ([]PeerState, error)
	// ListPeersAdvertised is ListPeers with Advertised counted.
	ListPeersAdvertised(ctx context.Context) ([]PeerState, error)
	// WatchBestPaths calls fn with every change to the learned (not locally
	// originated) best routes, starting with the current ones, until ctx
	// ends. fn is called from one goroutine at a time.
	WatchBestPaths(ctx context.Context, fn func([]Route)) error
}
