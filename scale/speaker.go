package scale

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// Speaker is a simulated node's BGP speaker: one iBGP session (IPv4
// unicast) from its own loopback address, dialled to a reflector; it
// advertises its blocks when told and counts the routes it receives. It
// stands for what a node's speaker does on the wire and no more, so that a
// thousand of them fit in one process.
type Speaker struct {
	Local    netip.Addr
	AS       uint32
	Prefixes []netip.Prefix

	conn    net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	routes  map[netip.Prefix]bool
	want    int
	full    chan struct{}
	fullAt  time.Time
	readErr error
	done    chan struct{}
}

// NewSpeaker makes a speaker at local with AS as and the prefixes it
// originates.
func NewSpeaker(local netip.Addr, as uint32, prefixes []netip.Prefix) *Speaker {
	return &Speaker{Local: local, AS: as, Prefixes: prefixes, routes: map[netip.Prefix]bool{}}
}

// Connect dials remote from the speaker's address and exchanges OPEN and
// KEEPALIVE until the session is Established, retrying (a reflector that
// does not know the speaker yet closes the connection) until ctx ends.
func (s *Speaker) Connect(ctx context.Context, remote netip.AddrPort) error {
	var last error
	for ctx.Err() == nil {
		if last = s.connectOnce(ctx, remote); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("speaker %s to %s: %w (last: %v)", s.Local, remote, ctx.Err(), last)
}

func (s *Speaker) connectOnce(ctx context.Context, remote netip.AddrPort) error {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.Local, 0)), Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", remote.String())
	if err != nil {
		return err
	}
	as2 := uint16(s.AS)
	if s.AS > 65535 {
		as2 = bgp.AS_TRANS
	}
	caps := []bgp.ParameterCapabilityInterface{bgp.NewCapMultiProtocol(bgp.RF_IPv4_UC), bgp.NewCapFourOctetASNumber(s.AS), bgp.NewCapRouteRefresh()}
	open := bgp.NewBGPOpenMessage(as2, 90, s.Local.String(), []bgp.OptionParameterInterface{bgp.NewOptionParameterCapability(caps)})
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeMsg(c, open); err != nil {
		c.Close()
		return err
	}
	m, err := readMsg(c)
	if err != nil {
		c.Close()
		return fmt.Errorf("waiting for OPEN: %w", err)
	}
	if m.Header.Type != bgp.BGP_MSG_OPEN {
		c.Close()
		return fmt.Errorf("got message type %d, want OPEN", m.Header.Type)
	}
	if err := writeMsg(c, bgp.NewBGPKeepAliveMessage()); err != nil {
		c.Close()
		return err
	}
	if m, err = readMsg(c); err != nil || m.Header.Type != bgp.BGP_MSG_KEEPALIVE {
		c.Close()
		return fmt.Errorf("waiting for KEEPALIVE: %v (type %v)", err, m)
	}
	_ = c.SetDeadline(time.Time{})
	s.conn = c
	s.done = make(chan struct{})
	go s.read()
	go s.keepalive()
	return nil
}

// Expect sets how many routes make the speaker's table complete and
// returns a channel closed once it has them.
func (s *Speaker) Expect(n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.full = n, make(chan struct{})
	if len(s.routes) >= n {
		s.fullAt = time.Now()
		close(s.full)
	}
	return s.full
}

// FullAt is when the table became complete.
func (s *Speaker) FullAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fullAt
}

// Routes is how many prefixes the speaker has received.
func (s *Speaker) Routes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.routes)
}

// Advertise sends the speaker's prefixes in one UPDATE, next hop itself.
func (s *Speaker) Advertise() error {
	var nlri []*bgp.IPAddrPrefix
	for _, p := range s.Prefixes {
		nlri = append(nlri, bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String()))
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		bgp.NewPathAttributeAsPath(nil), bgp.NewPathAttributeNextHop(s.Local.String()), bgp.NewPathAttributeLocalPref(100)}
	return s.write(bgp.NewBGPUpdateMessage(nil, attrs, nlri))
}

// Close ends the session.
func (s *Speaker) Close() {
	if s.conn != nil {
		s.conn.Close()
		<-s.done
	}
}

func (s *Speaker) write(m *bgp.BGPMessage) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return writeMsg(s.conn, m)
}

func (s *Speaker) keepalive() {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if s.write(bgp.NewBGPKeepAliveMessage()) != nil {
				return
			}
		}
	}
}

func (s *Speaker) read() {
	defer close(s.done)
	for {
		m, err := readMsg(s.conn)
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		u, ok := m.Body.(*bgp.BGPUpdate)
		if !ok {
			continue
		}
		var add, del []netip.Prefix
		for _, p := range u.NLRI {
			add = append(add, toPrefix(p.Prefix, p.Length))
		}
		for _, p := range u.WithdrawnRoutes {
			del = append(del, toPrefix(p.Prefix, p.Length))
		}
		for _, a := range u.PathAttributes {
			switch a := a.(type) {
			case *bgp.PathAttributeMpReachNLRI:
				for _, p := range a.Value {
					if q, ok := p.(*bgp.IPAddrPrefix); ok {
						add = append(add, toPrefix(q.Prefix, q.Length))
					}
				}
			case *bgp.PathAttributeMpUnreachNLRI:
				for _, p := range a.Value {
					if q, ok := p.(*bgp.IPAddrPrefix); ok {
						del = append(del, toPrefix(q.Prefix, q.Length))
					}
				}
			}
		}
		s.mu.Lock()
		for _, p := range del {
			delete(s.routes, p)
		}
		for _, p := range add {
			s.routes[p] = true
		}
		if s.full != nil && s.fullAt.IsZero() && len(s.routes) >= s.want {
			s.fullAt = time.Now()
			close(s.full)
		}
		s.mu.Unlock()
	}
}

func toPrefix(ip net.IP, bits uint8) netip.Prefix {
	a, _ := netip.AddrFromSlice(ip.To4())
	return netip.PrefixFrom(a, int(bits))
}

func writeMsg(c net.Conn, m *bgp.BGPMessage) error {
	b, err := m.Serialize()
	if err != nil {
		return fmt.Errorf("encoding a BGP message: %w", err)
	}
	_, err = c.Write(b)
	return err
}

// readMsg reads one whole BGP message.
func readMsg(c net.Conn) (*bgp.BGPMessage, error) {
	hdr := make([]byte, bgp.BGP_HEADER_LENGTH)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < bgp.BGP_HEADER_LENGTH {
		return nil, errors.New("BGP message shorter than its header")
	}
	buf := make([]byte, n)
	copy(buf, hdr)
	if _, err := io.ReadFull(c, buf[bgp.BGP_HEADER_LENGTH:]); err != nil {
		return nil, err
	}
	m, err := bgp.ParseBGPMessage(buf)
	if err != nil {
		return nil, fmt.Errorf("decoding a BGP message: %w", err)
	}
	if m.Header.Type == bgp.BGP_MSG_NOTIFICATION {
		n := m.Body.(*bgp.BGPNotification)
		return nil, fmt.Errorf("NOTIFICATION code %d subcode %d", n.ErrorCode, n.ErrorSubcode)
	}
	return m, nil
}
