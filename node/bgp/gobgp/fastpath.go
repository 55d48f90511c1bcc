package gobgp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/reflector"
	"github.com/palisade-net/palisade/node/bgp/routepolicy"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// A route reflector's plain client sessions are held by its fast path
// (package reflector), which GoBGP sees through two sessions of its own:
// the reflector's upstream (the clients' routes) and downstream (what
// GoBGP sends a client). Every other session stays with GoBGP.

// internalDescription marks GoBGP's two neighbours of the fast path.
const internalDescription = "palisade-reflector"

// isInternal says whether a GoBGP neighbour address is one of the fast
// path's.
func isInternal(a netip.Addr) bool {
	return a == reflector.UpstreamAddr || a == reflector.DownstreamAddr
}

// fastLocked says whether the session p goes to the fast path: a
// route-reflector client (iBGP, not another reflector of the cluster)
// that this node connects to, with the default rules (no BGPFilter, next
// hop unchanged) and nothing GoBGP would do apart for it (GTSM, another
// local AS, our AS allowed in).
func (r *Router) fastLocked(p peers.Peer) bool {
	return r.fastOK && !r.notFast[p.Key()] && p.RRClient && !p.EBGP && !p.Passive && p.TTLSecurity == 0 && p.AllowASIn == 0 &&
		!p.KeepOriginalNextHop && !p.NextHopSelf && p.LocalAS == r.as && routepolicy.Plain(r.policy, p.Address)
}

func clientOf(p peers.Peer, restarting bool) reflector.Client {
	c := reflector.Client{Address: p.Address, Port: p.Port, Password: p.Password, Keepalive: p.KeepaliveTime,
		RestartTime: p.RestartTime, LLGR: p.Node != "", Restarting: restarting, Description: string(p.Type)}
	if p.SourceAddress.IsValid() && !p.SourceAddress.IsUnspecified() {
		c.Source = p.SourceAddress
	}
	return c
}

// internalPeer is GoBGP's neighbour for one of the fast path's sessions: a
// route-reflector client of this node's cluster, on loopback, that takes
// several paths per prefix (upstream) or long-lived stale routes
// (downstream).
func internalPeer(addr netip.Addr, port uint16, as uint32, clusterID string) *api.Peer {
	upstream := addr == reflector.UpstreamAddr
	ap := &api.Peer{
		Conf:           &api.PeerConf{NeighborAddress: addr.String(), PeerAsn: as, LocalAsn: as, Description: internalDescription},
		Transport:      &api.Transport{RemotePort: uint32(port), LocalAddress: "127.0.0.1"},
		Timers:         &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, IdleHoldTimeAfterReset: 1}},
		RouteReflector: &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: clusterID},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: uint32(peers.DefaultRestartTime / time.Second),
			NotificationEnabled: true, LonglivedEnabled: !upstream},
	}
	for _, f := range []*api.Family{
		{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST},
		{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST},
	} {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}}
		if upstream {
			as.AddPaths = &api.AddPaths{Config: &api.AddPathsConfig{Receive: true}}
		} else {
			as.LongLivedGracefulRestart = &api.LongLivedGracefulRestart{Config: &api.LongLivedGracefulRestartConfig{Enabled: true, RestartTime: 86400}}
		}
		ap.AfiSafis = append(ap.AfiSafis, as)
	}
	return ap
}

// ensureFast starts the fast path, or points GoBGP's neighbours of it at
// clusterID.
func (r *Router) ensureFast(ctx context.Context, clusterID string) (*reflector.Reflector, error) {
	r.mu.Lock()
	core, cluster, port := r.core, r.coreCluster, r.corePort
	r.mu.Unlock()
	if core != nil && cluster == clusterID {
		return core, nil
	}
	if core == nil {
		core = reflector.New(reflector.Config{AS: r.as, RouterID: r.routerID, Log: r.log, Unsupported: r.unsupported})
		var err error
		if port, err = core.Start(context.Background()); err != nil {
			return nil, fmt.Errorf("starting the route reflector's fast path: %w", err)
		}
		r.mu.Lock()
		r.core, r.corePort = core, port
		r.mu.Unlock()
	} else {
		for _, a := range []netip.Addr{reflector.UpstreamAddr, reflector.DownstreamAddr} {
			_ = r.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()})
		}
	}
	for _, a := range []netip.Addr{reflector.UpstreamAddr, reflector.DownstreamAddr} {
		if err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: internalPeer(a, port, r.as, clusterID)}); err != nil {
			return nil, fmt.Errorf("adding the route reflector's fast path to GoBGP: %w", err)
		}
	}
	r.mu.Lock()
	r.coreCluster = clusterID
	r.mu.Unlock()
	r.log.WithField("clusterID", clusterID).Info("Route reflector fast path started")
	return core, nil
}

// unsupported moves a session the fast path cannot serve to GoBGP, for
// good.
func (r *Router) unsupported(key netip.AddrPort) {
	r.mu.Lock()
	k := peers.Peer{Address: key.Addr(), Port: key.Port()}.Key()
	r.notFast[k] = true
	r.mu.Unlock()
	r.log.WithField("peer", k).Warn("The route reflector's fast path cannot serve this client (no 4-octet AS numbers); GoBGP takes the session")
	r.rebalance(context.Background())
}

// addFast gives the session p to the fast path.
func (r *Router) addFast(ctx context.Context, p peers.Peer, restarting bool) error {
	core, err := r.ensureFast(ctx, p.ClusterID)
	if err != nil {
		return err
	}
	core.SetClient(clientOf(p, restarting))
	r.mu.Lock()
	r.inCore[p.Key()] = p
	r.mu.Unlock()
	return nil
}

// rebalance moves the sessions whose place changed (a BGPFilter added or
// removed, a reflector role changed) between the fast path and GoBGP.
func (r *Router) rebalance(ctx context.Context) {
	r.mu.Lock()
	var toFast, toGoBGP []peers.Peer
	for k, p := range r.all {
		_, in := r.inCore[k]
		switch fast := r.fastLocked(p); {
		case fast && !in:
			toFast = append(toFast, p)
		case !fast && in:
			toGoBGP = append(toGoBGP, p)
		}
	}
	r.mu.Unlock()
	for _, p := range toGoBGP {
		r.log.WithField("peer", p.Key()).Info("Moving a route-reflector client session from the fast path to GoBGP")
		if err := r.removeFast(p); err == nil {
			if err := r.addGoBGP(ctx, p); err != nil {
				r.log.WithError(err).Warn("Adding peer")
			}
		}
	}
	for _, p := range toFast {
		r.log.WithField("peer", p.Key()).Info("Moving a route-reflector client session from GoBGP to the fast path")
		if err := r.deleteGoBGP(ctx, p); err != nil {
			r.log.WithError(err).Warn("Deleting peer")
			continue
		}
		r.mu.Lock()
		restarting := r.restarting
		r.mu.Unlock()
		if err := r.addFast(ctx, p, restarting); err != nil {
			r.log.WithError(err).Warn("Route reflector fast path unavailable; the session stays with GoBGP")
			_ = r.addGoBGP(ctx, p)
		}
	}
}

// removeFast takes the session p from the fast path.
func (r *Router) removeFast(p peers.Peer) error {
	r.mu.Lock()
	core := r.core
	_, in := r.inCore[p.Key()]
	delete(r.inCore, p.Key())
	r.mu.Unlock()
	if !in || core == nil {
		return fmt.Errorf("peer %s is not on the fast path", p.Key())
	}
	core.DeleteClient(netip.AddrPortFrom(p.Address, p.Port))
	return nil
}

// fastStates are the fast path's sessions as router.PeerStates.
func (r *Router) fastStates(advertised bool) []router.PeerState {
	r.mu.Lock()
	core := r.core
	r.mu.Unlock()
	if core == nil {
		return nil
	}
	var out []router.PeerState
	for _, s := range core.Clients(advertised) {
		port := s.Client.Port
		if port == 0 {
			port = 179
		}
		ps := router.PeerState{Address: s.Client.Address, Port: port, AS: r.as, Description: s.Client.Description,
			State: s.FSM, Reason: s.Reason, Since: s.Since, Received: s.Received, Accepted: s.Received,
			Advertised: s.Advertised, UpdatesReceived: s.UpdatesReceived, EndOfRIB: s.EndOfRIB}
		out = append(out, ps)
	}
	return out
}
