package gobgp

import (
	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/palisade-net/palisade/node/bgp/reflector"
)

// listPeerMethod is GoBGP's ListPeer call, which `gobgp neighbor` makes.
const listPeerMethod = "/apipb.GobgpApi/ListPeer"

// streamInterceptor keeps the gobgp CLI's view of the sessions as it was
// before the route-reflector fast path: GoBGP's answer to ListPeer leaves
// out its two sessions with the fast path and lists the fast path's
// client sessions (`gobgp neighbor`, `gobgp neighbor <address>`).
func (r *Router) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != listPeerMethod {
		return handler(srv, ss)
	}
	s := &listPeerStream{ServerStream: ss}
	if err := handler(srv, s); err != nil {
		return err
	}
	r.mu.Lock()
	core := r.core
	r.mu.Unlock()
	if core == nil || s.req == nil {
		return nil
	}
	for _, st := range core.Clients(s.req.GetEnableAdvertised()) {
		if a := s.req.GetAddress(); a != "" && a != st.Client.Address.String() {
			continue
		}
		if err := ss.SendMsg(&api.ListPeerResponse{Peer: r.apiState(st)}); err != nil {
			return err
		}
	}
	return nil
}

// listPeerStream passes GoBGP's answer on, without its sessions with the
// fast path, and keeps the request.
type listPeerStream struct {
	grpc.ServerStream
	req *api.ListPeerRequest
}

func (s *listPeerStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*api.ListPeerRequest); ok && err == nil {
		s.req = req
	}
	return err
}

func (s *listPeerStream) SendMsg(m any) error {
	if rsp, ok := m.(*api.ListPeerResponse); ok && rsp.GetPeer().GetConf().GetDescription() == internalDescription {
		return nil
	}
	return s.ServerStream.SendMsg(m)
}

// fsmStates are GoBGP's names of the states the fast path reports.
var fsmStates = map[string]api.PeerState_SessionState{
	"Idle": api.PeerState_IDLE, "Connect": api.PeerState_CONNECT, "Active": api.PeerState_ACTIVE,
	"OpenSent": api.PeerState_OPENSENT, "OpenConfirm": api.PeerState_OPENCONFIRM, "Established": api.PeerState_ESTABLISHED,
}

// apiState describes a fast-path session as GoBGP describes its own.
func (r *Router) apiState(st reflector.State) *api.Peer {
	addr := st.Client.Address
	fam := family(addr)
	p := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: addr.String(), PeerAsn: r.as, LocalAsn: r.as, Description: st.Client.Description},
		State: &api.PeerState{NeighborAddress: addr.String(), PeerAsn: r.as, LocalAsn: r.as, Description: st.Client.Description,
			SessionState: fsmStates[st.FSM], AdminState: api.PeerState_UP, Type: api.PeerType_INTERNAL,
			Messages: &api.Messages{Received: &api.Message{Update: st.UpdatesReceived}}},
		Transport:      &api.Transport{RemotePort: uint32(st.Client.Port)},
		Timers:         &api.Timers{State: &api.TimersState{}},
		RouteReflector: &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: r.clusterID()},
		AfiSafis: []*api.AfiSafi{{
			Config: &api.AfiSafiConfig{Family: fam, Enabled: true},
			State:  &api.AfiSafiState{Family: fam, Enabled: true, Received: st.Received, Accepted: st.Received, Advertised: st.Advertised},
		}},
	}
	if st.RouterID.IsValid() {
		p.State.RouterId = st.RouterID.String()
	}
	if !st.Since.IsZero() {
		if st.FSM == "Established" {
			p.Timers.State.Uptime = timestamppb.New(st.Since)
		} else {
			p.Timers.State.Downtime = timestamppb.New(st.Since)
		}
	}
	if st.Client.Source.IsValid() {
		p.Transport.LocalAddress = st.Client.Source.String()
	}
	return p
}

func (r *Router) clusterID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.coreCluster
}
