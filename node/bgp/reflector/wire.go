package reflector

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// The families a session may carry.
var families = []bgp.RouteFamily{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC}

// familyOf is the unicast family of an address.
func familyOf(a netip.Addr) bgp.RouteFamily {
	if a.Is4() {
		return bgp.RF_IPv4_UC
	}
	return bgp.RF_IPv6_UC
}

// readMsg reads one whole BGP message (header included) into a fresh
// slice.
func readMsg(r *bufio.Reader) ([]byte, error) {
	hdr, err := r.Peek(bgp.BGP_HEADER_LENGTH)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < bgp.BGP_HEADER_LENGTH || n > bgp.BGP_MAX_MESSAGE_LENGTH {
		return nil, fmt.Errorf("bad BGP message length %d", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// msgType is the type of a whole message.
func msgType(b []byte) uint8 { return b[18] }

// serialize encodes a message; the messages built here always encode.
func serialize(m *bgp.BGPMessage, opts ...*bgp.MarshallingOption) []byte {
	b, err := m.Serialize(opts...)
	if err != nil {
		panic(fmt.Sprintf("encoding a BGP message: %v", err))
	}
	return b
}

var keepalive = serialize(bgp.NewBGPKeepAliveMessage())

// notification encodes a NOTIFICATION.
func notification(code, sub uint8) []byte {
	return serialize(bgp.NewBGPNotificationMessage(code, sub, nil))
}

// openParams is what this end announces in its OPEN.
type openParams struct {
	as       uint32
	id       netip.Addr
	hold     time.Duration
	families []bgp.RouteFamily
	// restartTime > 0 announces graceful restart (RFC 4724), with the
	// restart bit when restarting; llgrTime > 0 long-lived graceful
	// restart (RFC 9494) as well.
	restartTime time.Duration
	restarting  bool
	llgrTime    time.Duration
	// addPathSend announces sending several paths per prefix (RFC 7911).
	addPathSend bool
}

// peerCaps is what the peer announced, negotiated against ours.
type peerCaps struct {
	as       uint32
	id       netip.Addr
	hold     time.Duration // negotiated
	families map[bgp.RouteFamily]bool
	// gr: the peer announced graceful restart; grTime its restart time;
	// grRestarting its restart bit; grNotification the N bit.
	gr             bool
	grTime         time.Duration
	grRestarting   bool
	grNotification bool
	// llgr are the families both ends announced long-lived graceful
	// restart for, with the peer's stale time.
	llgr map[bgp.RouteFamily]time.Duration
	// addPathRecv are the families the peer takes several paths of.
	addPathRecv map[bgp.RouteFamily]bool
}

func (o openParams) message() []byte {
	caps := []bgp.ParameterCapabilityInterface{bgp.NewCapRouteRefresh(), bgp.NewCapFourOctetASNumber(o.as)}
	for _, f := range o.families {
		caps = append(caps, bgp.NewCapMultiProtocol(f))
	}
	if o.restartTime > 0 {
		var tuples []*bgp.CapGracefulRestartTuple
		for _, f := range o.families {
			tuples = append(tuples, bgp.NewCapGracefulRestartTuple(f, o.restarting))
		}
		secs := uint16(min(o.restartTime/time.Second, 4095))
		caps = append(caps, bgp.NewCapGracefulRestart(o.restarting, true, secs, tuples))
		if o.llgrTime > 0 {
			var lt []*bgp.CapLongLivedGracefulRestartTuple
			for _, f := range o.families {
				lt = append(lt, bgp.NewCapLongLivedGracefulRestartTuple(f, o.restarting, uint32(o.llgrTime/time.Second)))
			}
			caps = append(caps, bgp.NewCapLongLivedGracefulRestart(lt))
		}
	}
	if o.addPathSend {
		var tuples []*bgp.CapAddPathTuple
		for _, f := range o.families {
			tuples = append(tuples, bgp.NewCapAddPathTuple(f, bgp.BGP_ADD_PATH_SEND))
		}
		caps = append(caps, bgp.NewCapAddPath(tuples))
	}
	as2 := uint16(o.as)
	if o.as > 0xffff {
		as2 = bgp.AS_TRANS
	}
	return serialize(bgp.NewBGPOpenMessage(as2, uint16(o.hold/time.Second), o.id.String(),
		[]bgp.OptionParameterInterface{bgp.NewOptionParameterCapability(caps)}))
}

// errNotification is a NOTIFICATION the peer sent.
type errNotification struct{ code, sub uint8 }

func (e errNotification) Error() string {
	return fmt.Sprintf("the peer sent a NOTIFICATION (%s)", bgp.NewNotificationErrorCode(e.code, e.sub))
}

// errNoAS4 says the peer cannot take 4-octet AS numbers, which the fast
// path's shared messages need.
var errNoAS4 = errors.New("the peer does not announce 4-octet AS numbers")

// handshake exchanges OPEN and KEEPALIVE on a fresh connection and
// returns what the peer announced. wantAS, when not zero, is the AS the
// peer must have.
func handshake(c net.Conn, r *bufio.Reader, o openParams, wantAS uint32) (peerCaps, error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(o.message()); err != nil {
		return peerCaps{}, fmt.Errorf("sending OPEN: %w", err)
	}
	b, err := readMsg(r)
	if err != nil {
		return peerCaps{}, fmt.Errorf("waiting for OPEN: %w", err)
	}
	m, err := bgp.ParseBGPMessage(b)
	if err != nil {
		_, _ = c.Write(notification(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR, 0))
		return peerCaps{}, fmt.Errorf("decoding OPEN: %w", err)
	}
	if n, ok := m.Body.(*bgp.BGPNotification); ok {
		return peerCaps{}, errNotification{n.ErrorCode, n.ErrorSubcode}
	}
	open, ok := m.Body.(*bgp.BGPOpen)
	if !ok {
		_, _ = c.Write(notification(bgp.BGP_ERROR_FSM_ERROR, 0))
		return peerCaps{}, fmt.Errorf("got message type %d, want OPEN", m.Header.Type)
	}
	pc := negotiate(open, o)
	// Checked first: without the capability the AS is unknown here. A
	// Cease (connection rejected), not an OPEN error: the session is
	// handed to GoBGP, which connects at once, and a peer takes an OPEN
	// error as a fault and waits before it accepts again (BIRD, 60 s).
	if pc.as == 0 {
		_, _ = c.Write(notification(bgp.BGP_ERROR_CEASE, bgp.BGP_ERROR_SUB_CONNECTION_REJECTED))
		return peerCaps{}, errNoAS4
	}
	if wantAS != 0 && pc.as != wantAS {
		_, _ = c.Write(notification(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR, bgp.BGP_ERROR_SUB_BAD_PEER_AS))
		return peerCaps{}, fmt.Errorf("the peer's AS is %d, want %d", pc.as, wantAS)
	}
	if !pc.id.IsValid() || pc.id == o.id {
		_, _ = c.Write(notification(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR, bgp.BGP_ERROR_SUB_BAD_BGP_IDENTIFIER))
		return peerCaps{}, fmt.Errorf("bad BGP identifier %s", pc.id)
	}
	if _, err := c.Write(keepalive); err != nil {
		return peerCaps{}, fmt.Errorf("sending KEEPALIVE: %w", err)
	}
	b, err = readMsg(r)
	if err != nil {
		return peerCaps{}, fmt.Errorf("waiting for KEEPALIVE: %w", err)
	}
	switch msgType(b) {
	case bgp.BGP_MSG_KEEPALIVE:
	case bgp.BGP_MSG_NOTIFICATION:
		if m, err := bgp.ParseBGPMessage(b); err == nil {
			n := m.Body.(*bgp.BGPNotification)
			return peerCaps{}, errNotification{n.ErrorCode, n.ErrorSubcode}
		}
		return peerCaps{}, errors.New("the peer sent a NOTIFICATION")
	default:
		return peerCaps{}, fmt.Errorf("got message type %d, want KEEPALIVE", msgType(b))
	}
	return pc, nil
}

// negotiate reads the peer's OPEN against ours. as is 0 when the peer
// did not announce 4-octet AS numbers.
func negotiate(open *bgp.BGPOpen, o openParams) peerCaps {
	pc := peerCaps{families: map[bgp.RouteFamily]bool{}, llgr: map[bgp.RouteFamily]time.Duration{}, addPathRecv: map[bgp.RouteFamily]bool{}}
	pc.id, _ = netip.AddrFromSlice(open.ID.To4())
	hold := time.Duration(open.HoldTime) * time.Second
	pc.hold = min(hold, o.hold)
	announced := map[bgp.RouteFamily]bool{}
	mp := false
	var llgr map[bgp.RouteFamily]time.Duration
	for _, p := range open.OptParams {
		cp, ok := p.(*bgp.OptionParameterCapability)
		if !ok {
			continue
		}
		for _, c := range cp.Capability {
			switch c := c.(type) {
			case *bgp.CapFourOctetASNumber:
				pc.as = c.CapValue
			case *bgp.CapMultiProtocol:
				mp = true
				announced[c.CapValue] = true
			case *bgp.CapGracefulRestart:
				pc.gr = true
				pc.grTime = time.Duration(c.Time) * time.Second
				pc.grRestarting = c.Flags&0x08 != 0
				pc.grNotification = c.Flags&0x04 != 0
			case *bgp.CapLongLivedGracefulRestart:
				llgr = map[bgp.RouteFamily]time.Duration{}
				for _, t := range c.Tuples {
					llgr[bgp.AfiSafiToRouteFamily(t.AFI, t.SAFI)] = time.Duration(t.RestartTime) * time.Second
				}
			case *bgp.CapAddPath:
				for _, t := range c.Tuples {
					if t.Mode&bgp.BGP_ADD_PATH_RECEIVE != 0 {
						pc.addPathRecv[t.RouteFamily] = true
					}
				}
			}
		}
	}
	if !mp {
		announced[bgp.RF_IPv4_UC] = true
	}
	for _, f := range o.families {
		if announced[f] {
			pc.families[f] = true
			if t, ok := llgr[f]; ok && o.llgrTime > 0 {
				pc.llgr[f] = t
			}
		}
	}
	return pc
}
