package gobgp

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/palisade-net/palisade/node/bgp/reflector"
)

// GoBGP's calls that `gobgp neighbor` and `gobgp global rib` make.
const (
	listPeerMethod = "/apipb.GobgpApi/ListPeer"
	listPathMethod = "/apipb.GobgpApi/ListPath"
)

// streamInterceptor keeps the gobgp CLI's view as it was before the
// route-reflector fast path: GoBGP's answer to ListPeer leaves out its two
// sessions with the fast path and lists the fast path's client sessions
// (`gobgp neighbor`, `gobgp neighbor <address>`); its paths learned from
// the fast path name the client they came from (`gobgp global rib`); and
// a client session's tables come from the fast path (`gobgp neighbor
// <address> adj-in`, `adj-out`).
func (r *Router) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r.mu.Lock()
	core := r.core
	r.mu.Unlock()
	if core == nil {
		return handler(srv, ss)
	}
	switch info.FullMethod {
	case listPathMethod:
		return r.listPath(core, srv, ss, handler)
	case listPeerMethod:
	default:
		return handler(srv, ss)
	}
	s := &listPeerStream{ServerStream: ss}
	if err := handler(srv, s); err != nil {
		return err
	}
	if s.req == nil {
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

// listPath answers ListPath: a client session's tables from the fast path,
// GoBGP's own with the paths of the fast path's upstream session named
// after the client they came from.
func (r *Router) listPath(core *reflector.Reflector, srv any, ss grpc.ServerStream, handler grpc.StreamHandler) error {
	var req api.ListPathRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	if t := req.GetTableType(); t == api.TableType_ADJ_IN || t == api.TableType_ADJ_OUT {
		if a, err := netip.ParseAddr(req.GetName()); err == nil {
			if routes, ok := core.Routes(a, t == api.TableType_ADJ_IN); ok {
				return sendRoutes(ss, &req, routes)
			}
		}
	}
	return handler(srv, &listPathStream{ServerStream: ss, req: &req, core: core})
}

// sendRoutes sends a fast-path session's routes as ListPath's answer.
func sendRoutes(ss grpc.ServerStream, req *api.ListPathRequest, routes []reflector.Route) error {
	want := req.GetFamily()
	for _, rt := range routes {
		p, err := apiutil.NewPath(rt.NLRI, false, rt.Attrs, time.Now())
		if err != nil {
			continue
		}
		if want != nil && (p.GetFamily().GetAfi() != want.GetAfi() || p.GetFamily().GetSafi() != want.GetSafi()) {
			continue
		}
		if err := ss.SendMsg(&api.ListPathResponse{Destination: &api.Destination{Prefix: rt.NLRI.String(), Paths: []*api.Path{p}}}); err != nil {
			return err
		}
	}
	return nil
}

// listPathStream hands GoBGP the request already read, and renames the
// paths of the fast path's upstream session after their clients.
type listPathStream struct {
	grpc.ServerStream
	req  *api.ListPathRequest
	core *reflector.Reflector
	read bool
}

func (s *listPathStream) RecvMsg(m any) error {
	if s.read {
		return io.EOF
	}
	s.read = true
	dst, ok := m.(*api.ListPathRequest)
	if !ok {
		return fmt.Errorf("ListPath: unexpected request %T", m)
	}
	proto.Merge(dst, s.req)
	return nil
}

func (s *listPathStream) SendMsg(m any) error {
	if rsp, ok := m.(*api.ListPathResponse); ok {
		for _, p := range rsp.GetDestination().GetPaths() {
			if p.GetNeighborIp() != reflector.UpstreamAddr.String() {
				continue
			}
			if addr, ok := s.core.Origin(originatorOf(p), family6(p)); ok {
				p.NeighborIp, p.SourceId = addr.String(), originatorOf(p).String()
			}
		}
	}
	return s.ServerStream.SendMsg(m)
}

// originatorOf is a path's ORIGINATOR_ID, invalid when it has none.
func originatorOf(p *api.Path) netip.Addr {
	for _, a := range p.GetPattrs() {
		var o api.OriginatorIdAttribute
		if a.MessageIs(&o) && a.UnmarshalTo(&o) == nil {
			id, _ := netip.ParseAddr(o.GetId())
			return id
		}
	}
	return netip.Addr{}
}

// family6 says whether a path is IPv6.
func family6(p *api.Path) bool { return p.GetFamily().GetAfi() == api.Family_AFI_IP6 }
