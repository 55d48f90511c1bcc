// Package gobgp implements router.Router over an in-process GoBGP server,
// optionally serving GoBGP's gRPC API so the stock `gobgp` CLI can inspect
// the node.
package gobgp

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/palisade-net/palisade/node/bgp/paths"
	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/reflector"
	"github.com/palisade-net/palisade/node/bgp/routepolicy"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// Router is a GoBGP speaker.
type Router struct {
	srv *server.BgpServer
	log *log.Entry

	mu      sync.Mutex
	uuids   map[netip.Prefix][]byte // advertised paths
	started bool
	// restarting is set when this speaker restarted (graceful restart)
	// until its sessions converged.
	restarting bool
	// cancel stops the session watch.
	cancel context.CancelFunc
	// policy is the route policy in place.
	policy routepolicy.Policy
	// notes says why sessions are down, from GoBGP's log.
	notes *peerNotes
	// eor says which End-of-RIB markers each session's peer has sent.
	eor *eorLog
	// states are the session states the watch last saw.
	states *peerStates

	// as and routerID are the speaker's, from Start.
	as       uint32
	routerID netip.Addr
	// The route-reflector fast path (fastpath.go): fastOK says it may be
	// used; core runs once a session needs it, with GoBGP's neighbours of
	// it in cluster coreCluster, dialling corePort; inCore are the
	// sessions it holds and all every session added, by Key.
	fastOK      bool
	core        *reflector.Reflector
	coreCluster string
	corePort    uint16
	inCore      map[string]peers.Peer
	all         map[string]peers.Peer
	// notFast are sessions the fast path cannot serve.
	notFast map[string]bool
}

var _ router.Router = (*Router)(nil)

// New creates a GoBGP server. grpcListen ("127.0.0.1:50051") serves GoBGP's
// gRPC API; empty serves none.
func New(grpcListen string, logger *log.Entry) *Router {
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	notes := newPeerNotes()
	r := &Router{log: logger, uuids: map[netip.Prefix][]byte{}, notes: notes, eor: &eorLog{seen: map[string]map[string]bool{}},
		states: &peerStates{last: map[string]api.PeerState_SessionState{}}, fastOK: true,
		inCore: map[string]peers.Peer{}, all: map[string]peers.Peer{}, notFast: map[string]bool{}}
	opts := []server.ServerOption{server.LoggerOption(&logAdapter{e: logger.WithField("component", "gobgp"), notes: notes})}
	if grpcListen != "" {
		opts = append(opts, server.GrpcListenAddress(grpcListen),
			server.GrpcOption([]grpc.ServerOption{grpc.ChainStreamInterceptor(r.streamInterceptor)}))
	}
	r.srv = server.NewBgpServer(opts...)
	go r.srv.Serve()
	return r
}

// Start implements router.Router. Multipath is enabled so equal-cost
// routes from several peers are all reported.
func (r *Router) Start(ctx context.Context, g router.Global) error {
	port := g.ListenPort
	if port == 0 {
		port = 179
	}
	req := &api.StartBgpRequest{Global: &api.Global{
		Asn:              g.AS,
		RouterId:         g.RouterID.String(),
		ListenPort:       port,
		ListenAddresses:  g.ListenAddresses,
		UseMultiplePaths: true,
		GracefulRestart: &api.GracefulRestart{
			Enabled:         true,
			RestartTime:     uint32(peers.DefaultRestartTime / time.Second),
			LocalRestarting: g.Restarting,
		},
	}}
	if err := r.srv.StartBgp(ctx, req); err != nil {
		return fmt.Errorf("starting GoBGP (AS %d, router ID %s, port %d): %w", g.AS, g.RouterID, port, err)
	}
	if err := r.installPolicy(ctx, g.Policy); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	if err := r.watchPeers(wctx); err != nil {
		cancel()
		return fmt.Errorf("watching BGP sessions: %w", err)
	}
	r.mu.Lock()
	r.cancel = cancel
	r.started = true
	r.restarting = g.Restarting
	r.as, r.routerID = g.AS, g.RouterID
	r.fastOK = r.fastOK && g.RouterID.Is4()
	r.mu.Unlock()
	return nil
}

// Stop implements router.Router.
func (r *Router) Stop(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.started = false
	if r.cancel != nil {
		r.cancel()
	}
	core := r.core
	r.mu.Unlock()
	if core != nil {
		core.Stop()
	}
	var err error
	if started {
		err = r.srv.StopBgp(ctx, &api.StopBgpRequest{})
	}
	r.srv.Stop()
	return err
}

// Leave implements router.Router: the speaker's own work stops, its
// sessions stay open until the process exits (the kernel then closes them
// without a NOTIFICATION, so the peers keep this node's routes as for a
// crash, graceful restart).
func (r *Router) Leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
}

// Converged implements router.Router: sessions added from now on do not
// announce a restart.
func (r *Router) Converged() {
	r.mu.Lock()
	r.restarting = false
	core := r.core
	r.mu.Unlock()
	if core != nil {
		core.Converged()
	}
}

// family returns the unicast family of an address.
func family(a netip.Addr) *api.Family {
	if a.Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// apiPeer converts a desired session into GoBGP's form.
func apiPeer(p peers.Peer, restarting bool) *api.Peer {
	gr := uint32(p.RestartTime / time.Second)
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.AS,
			LocalAsn:        p.LocalAS,
			AuthPassword:    p.Password,
			Description:     string(p.Type),
			AllowOwnAsn:     uint32(p.AllowASIn),
		},
		Transport: &api.Transport{RemotePort: uint32(p.Port), PassiveMode: p.Passive},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry: 1,
			// A session made again on purpose (a route policy that
			// withdraws routes) waits a second, not GoBGP's 30.
			IdleHoldTimeAfterReset: 1,
		}},
		GracefulRestart: &api.GracefulRestart{
			Enabled:             true,
			RestartTime:         gr,
			NotificationEnabled: true,
			LocalRestarting:     restarting,
		},
		AfiSafis: []*api.AfiSafi{{
			Config:            &api.AfiSafiConfig{Family: family(p.Address), Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
		}},
	}
	if p.Node != "" {
		// Between nodes: a reconnection that fails while the peer
		// restarts keeps its routes (long-lived graceful restart) instead
		// of dropping them.
		ap.GracefulRestart.LonglivedEnabled = true
		ap.AfiSafis[0].LongLivedGracefulRestart = &api.LongLivedGracefulRestart{Config: &api.LongLivedGracefulRestartConfig{Enabled: true, RestartTime: gr}}
	}
	if p.KeepaliveTime > 0 {
		ka := uint64(p.KeepaliveTime / time.Second)
		if ka == 0 {
			ka = 1
		}
		ap.Timers.Config.KeepaliveInterval = ka
		ap.Timers.Config.HoldTime = 3 * ka
	}
	if p.SourceAddress.IsValid() {
		ap.Transport.LocalAddress = p.SourceAddress.String()
	}
	if p.RRClient {
		ap.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: p.ClusterID}
	}
	switch {
	case p.TTLSecurity > 0:
		// GTSM: GoBGP sends with TTL 255 and sets the socket's minimum
		// TTL (it refuses eBGP multihop beside it).
		ap.TtlSecurity = &api.TtlSecurity{Enabled: true, TtlMin: 256 - uint32(p.TTLSecurity)}
	case p.EBGP:
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	return ap
}

// AddPeer implements router.Router: a route reflector's plain client
// session goes to the fast path, every other to GoBGP.
func (r *Router) AddPeer(ctx context.Context, p peers.Peer) error {
	r.mu.Lock()
	r.all[p.Key()] = p
	fast := r.fastLocked(p)
	restarting := r.restarting
	r.mu.Unlock()
	if fast {
		err := r.addFast(ctx, p, restarting)
		if err == nil {
			return nil
		}
		r.log.WithError(err).Warn("Route reflector fast path unavailable; the session goes to GoBGP")
		r.mu.Lock()
		r.fastOK = false
		r.mu.Unlock()
	}
	return r.addGoBGP(ctx, p)
}

// addGoBGP adds the session p to GoBGP.
func (r *Router) addGoBGP(ctx context.Context, p peers.Peer) error {
	r.mu.Lock()
	restarting := r.restarting
	r.mu.Unlock()
	r.notes.forget(p.Address.String())
	r.states.forget(p.Address.String())
	r.eor.reset(p.Address.String())
	if err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, restarting)}); err != nil {
		return fmt.Errorf("adding peer %s (AS %d): %w", p.Key(), p.AS, err)
	}
	return nil
}

// UpdatePeer implements router.Router; a changed session is reset so the
// new settings (timers, password, capabilities) take effect.
//
// GoBGP's UpdatePeer keeps a neighbour's route-reflector settings as they
// were added (it compares neither the client flag nor the cluster ID), so
// a session whose reflector role changed is deleted and added again: a
// node that became a reflector of this node's cluster after this node
// made it a client would otherwise stay one, this node reflecting every
// route to it with our CLUSTER_LIST while it reflects its own the other
// way without, and the two reflectors would route their clients' blocks
// through each other.
func (r *Router) UpdatePeer(ctx context.Context, p peers.Peer) error {
	r.mu.Lock()
	r.all[p.Key()] = p
	_, inCore := r.inCore[p.Key()]
	fast := r.fastLocked(p)
	restarting := r.restarting
	core := r.core
	r.mu.Unlock()
	switch {
	case inCore && fast:
		core.SetClient(clientOf(p, restarting))
		r.mu.Lock()
		r.inCore[p.Key()] = p
		r.mu.Unlock()
		return nil
	case inCore:
		if err := r.removeFast(p); err != nil {
			return err
		}
		return r.addGoBGP(ctx, p)
	case fast:
		if err := r.deleteGoBGP(ctx, p); err != nil {
			return err
		}
		return r.AddPeer(ctx, p)
	}
	if r.reflectorChanged(ctx, p) {
		if err := r.deleteGoBGP(ctx, p); err != nil {
			return err
		}
		return r.addGoBGP(ctx, p)
	}
	rsp, err := r.srv.UpdatePeer(ctx, &api.UpdatePeerRequest{Peer: apiPeer(p, false)})
	if err != nil {
		return fmt.Errorf("updating peer %s (AS %d): %w", p.Key(), p.AS, err)
	}
	if rsp.GetNeedsSoftResetIn() {
		_ = r.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: p.Address.String(), Soft: true, Direction: api.ResetPeerRequest_IN})
	}
	return nil
}

// reflectorChanged reports whether GoBGP's neighbour p.Address has other
// route-reflector settings than p wants.
func (r *Router) reflectorChanged(ctx context.Context, p peers.Peer) bool {
	changed := false
	_ = r.srv.ListPeer(ctx, &api.ListPeerRequest{Address: p.Address.String()}, func(have *api.Peer) {
		rr := have.GetRouteReflector()
		clusterID := ""
		if p.RRClient {
			clusterID = p.ClusterID
		}
		haveID := ""
		if rr.GetRouteReflectorClient() {
			haveID = rr.GetRouteReflectorClusterId()
		}
		changed = rr.GetRouteReflectorClient() != p.RRClient || haveID != clusterID
	})
	return changed
}

// DeletePeer implements router.Router.
func (r *Router) DeletePeer(ctx context.Context, p peers.Peer) error {
	r.mu.Lock()
	delete(r.all, p.Key())
	_, inCore := r.inCore[p.Key()]
	r.mu.Unlock()
	if inCore {
		return r.removeFast(p)
	}
	return r.deleteGoBGP(ctx, p)
}

// deleteGoBGP deletes the session p from GoBGP.
func (r *Router) deleteGoBGP(ctx context.Context, p peers.Peer) error {
	if err := r.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
		return fmt.Errorf("deleting peer %s: %w", p.Key(), err)
	}
	r.notes.forget(p.Address.String())
	return nil
}

// apiPath converts an originated path.
func apiPath(p paths.Path) (*api.Path, error) {
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: p.Prefix.Addr().String(), PrefixLen: uint32(p.Prefix.Bits())})
	if err != nil {
		return nil, err
	}
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0}) // IGP
	attrs := []*anypb.Any{origin}
	fam := family(p.Prefix.Addr())
	if p.Prefix.Addr().Is4() {
		nh, _ := anypb.New(&api.NextHopAttribute{NextHop: p.NextHop.String()})
		attrs = append(attrs, nh)
	} else {
		mp, _ := anypb.New(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{p.NextHop.String()}, Nlris: []*anypb.Any{nlri}})
		attrs = append(attrs, mp)
	}
	if len(p.Communities) > 0 {
		c, _ := anypb.New(&api.CommunitiesAttribute{Communities: p.Communities})
		attrs = append(attrs, c)
	}
	if len(p.LargeCommunities) > 0 {
		lc := &api.LargeCommunitiesAttribute{}
		for _, l := range p.LargeCommunities {
			lc.Communities = append(lc.Communities, &api.LargeCommunity{GlobalAdmin: l[0], LocalData1: l[1], LocalData2: l[2]})
		}
		c, _ := anypb.New(lc)
		attrs = append(attrs, c)
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: attrs}, nil
}

// AdvertisePath implements router.Router; advertising a prefix again
// replaces its attributes.
func (r *Router) AdvertisePath(ctx context.Context, p paths.Path) error {
	ap, err := apiPath(p)
	if err != nil {
		return fmt.Errorf("advertising %s: %w", p.Prefix, err)
	}
	rsp, err := r.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: ap})
	if err != nil {
		return fmt.Errorf("advertising %s: %w", p.Prefix, err)
	}
	r.mu.Lock()
	r.uuids[p.Prefix] = rsp.GetUuid()
	r.mu.Unlock()
	return nil
}

// WithdrawPath implements router.Router.
func (r *Router) WithdrawPath(ctx context.Context, p paths.Path) error {
	r.mu.Lock()
	id := r.uuids[p.Prefix]
	delete(r.uuids, p.Prefix)
	r.mu.Unlock()
	req := &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Uuid: id}
	if id == nil {
		ap, err := apiPath(p)
		if err != nil {
			return fmt.Errorf("withdrawing %s: %w", p.Prefix, err)
		}
		req = &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: ap.Family, Path: ap}
	}
	if err := r.srv.DeletePath(ctx, req); err != nil {
		return fmt.Errorf("withdrawing %s: %w", p.Prefix, err)
	}
	return nil
}

// sessionStates names GoBGP's FSM states as BIRD and Calico print them.
var sessionStates = map[api.PeerState_SessionState]string{
	api.PeerState_UNKNOWN:     "Idle",
	api.PeerState_IDLE:        "Idle",
	api.PeerState_CONNECT:     "Connect",
	api.PeerState_ACTIVE:      "Active",
	api.PeerState_OPENSENT:    "OpenSent",
	api.PeerState_OPENCONFIRM: "OpenConfirm",
	api.PeerState_ESTABLISHED: "Established",
}

// ListPeers implements router.Router.
func (r *Router) ListPeers(ctx context.Context) ([]router.PeerState, error) {
	return r.listPeers(ctx, false)
}

// ListPeersAdvertised implements router.Router.
func (r *Router) ListPeersAdvertised(ctx context.Context) ([]router.PeerState, error) {
	return r.listPeers(ctx, true)
}

func (r *Router) listPeers(ctx context.Context, advertised bool) ([]router.PeerState, error) {
	out := r.fastStates(advertised)
	err := r.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: advertised}, func(p *api.Peer) {
		if p.GetConf().GetDescription() == internalDescription {
			return
		}
		ps := router.PeerState{
			Description:     p.GetConf().GetDescription(),
			AS:              p.GetConf().GetPeerAsn(),
			State:           sessionStates[p.GetState().GetSessionState()],
			Port:            uint16(p.GetTransport().GetRemotePort()),
			UpdatesReceived: p.GetState().GetMessages().GetReceived().GetUpdate(),
		}
		ps.Address, _ = netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if ps.State != "Established" {
			ps.Reason = r.notes.reason(p.GetConf().GetNeighborAddress())
		}
		if st := p.GetTimers().GetState(); st != nil {
			if p.GetState().GetSessionState() == api.PeerState_ESTABLISHED && st.GetUptime() != nil {
				ps.Since = st.GetUptime().AsTime()
			} else if st.GetDowntime() != nil {
				ps.Since = st.GetDowntime().AsTime()
			}
		}
		// A peer that announced graceful restart sends End-of-RIB for
		// each family, whatever families its capability lists (FRR's
		// helper mode lists none); one that did not may never send it.
		grCap := false
		for _, c := range p.GetState().GetRemoteCap() {
			grCap = grCap || c.MessageIs((*api.GracefulRestartCapability)(nil))
		}
		ps.EndOfRIB = true
		for _, a := range p.GetAfiSafis() {
			ps.Received += a.GetState().GetReceived()
			ps.Accepted += a.GetState().GetAccepted()
			ps.Advertised += a.GetState().GetAdvertised()
			if grCap && a.GetConfig().GetEnabled() && !r.eor.has(p.GetConf().GetNeighborAddress(), familyKey(a.GetConfig().GetFamily())) {
				ps.EndOfRIB = false
			}
		}
		out = append(out, ps)
	})
	if err != nil {
		return nil, fmt.Errorf("listing peers: %w", err)
	}
	return out, nil
}

// WatchBestPaths implements router.Router.
func (r *Router) WatchBestPaths(ctx context.Context, fn func([]router.Route)) error {
	events := make(chan []*api.Path, 1024)
	req := &api.WatchEventRequest{Table: &api.WatchEventRequest_Table{
		Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_BEST, Init: true}},
	}}
	err := r.srv.WatchEvent(ctx, req, func(rsp *api.WatchEventResponse) {
		if t := rsp.GetTable(); t != nil && len(t.Paths) > 0 {
			select {
			case events <- t.Paths:
			case <-ctx.Done():
			}
		}
	})
	if err != nil {
		return fmt.Errorf("watching best paths: %w", err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ps := <-events:
				// Drain what is queued into one batch.
				batch := [][]*api.Path{ps}
			drain:
				for len(batch) < 256 {
					select {
					case more := <-events:
						batch = append(batch, more)
					default:
						break drain
					}
				}
				var routes []router.Route
				for _, ps := range batch {
					routes = append(routes, r.toRoutes(ps)...)
				}
				if len(routes) > 0 {
					fn(routes)
				}
			}
		}
	}()
	return nil
}

// toRoutes groups one event's paths by prefix: with multipath each group
// is the full new set of equal-cost paths (or a lone withdrawal).
func (r *Router) toRoutes(ps []*api.Path) []router.Route {
	var order []netip.Prefix
	byPfx := map[netip.Prefix]*router.Route{}
	for _, p := range ps {
		pfx, nh, err := decodePath(p)
		if err != nil {
			r.log.WithError(err).Debug("Skipping undecodable path")
			continue
		}
		rt, ok := byPfx[pfx]
		if !ok {
			rt = &router.Route{Prefix: pfx}
			byPfx[pfx] = rt
			order = append(order, pfx)
		}
		// Locally originated paths and withdrawals add no next hop.
		if p.IsWithdraw || p.NeighborIp == "" || p.NeighborIp == "<nil>" || p.IsNexthopInvalid || !nh.IsValid() {
			continue
		}
		dup := false
		for _, h := range rt.NextHops {
			dup = dup || h == nh
		}
		if !dup {
			rt.NextHops = append(rt.NextHops, nh)
		}
	}
	out := make([]router.Route, 0, len(order))
	for _, pfx := range order {
		out = append(out, *byPfx[pfx])
	}
	return out
}

// decodePath reads a path's prefix and next hop.
func decodePath(p *api.Path) (netip.Prefix, netip.Addr, error) {
	var ipp api.IPAddressPrefix
	if err := p.GetNlri().UnmarshalTo(&ipp); err != nil {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("nlri: %w", err)
	}
	a, err := netip.ParseAddr(ipp.Prefix)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("nlri prefix %q: %w", ipp.Prefix, err)
	}
	pfx := netip.PrefixFrom(a, int(ipp.PrefixLen)).Masked()
	var nh netip.Addr
	for _, at := range p.GetPattrs() {
		switch {
		case at.MessageIs((*api.NextHopAttribute)(nil)):
			var v api.NextHopAttribute
			if at.UnmarshalTo(&v) == nil {
				nh, _ = netip.ParseAddr(v.NextHop)
			}
		case at.MessageIs((*api.MpReachNLRIAttribute)(nil)):
			var v api.MpReachNLRIAttribute
			if at.UnmarshalTo(&v) == nil && len(v.NextHops) > 0 {
				nh, _ = netip.ParseAddr(v.NextHops[0])
			}
		}
	}
	return pfx, nh, nil
}
