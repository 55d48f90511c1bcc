package scale

import (
	"bufio"
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
	br      *bufio.Reader
	ln      net.Listener
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
	return s.handshake(c)
}

// Listen makes the speaker wait for its reflector to connect, at its own
// address on port 179 (Palisade's reflector connects to its clients).
func (s *Speaker) Listen() error {
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(s.Local, 179).String())
	if err != nil {
		return fmt.Errorf("speaker %s: %w", s.Local, err)
	}
	s.ln = ln
	return nil
}

// Accept waits, after Listen, until the reflector connected and the
// session is Established; a failed attempt is answered by waiting for
// the next one.
func (s *Speaker) Accept(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	var last error
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return fmt.Errorf("speaker %s: waiting for the reflector: %w (last: %v)", s.Local, err, last)
		}
		if last = s.handshake(c); last == nil {
			s.ln.Close()
			return nil
		}
	}
}

// handshake exchanges OPEN and KEEPALIVE on a new connection (either
// end's) and starts the session.
func (s *Speaker) handshake(c net.Conn) error {
	as2 := uint16(s.AS)
	if s.AS > 65535 {
		as2 = bgp.AS_TRANS
	}
	caps := []bgp.ParameterCapabilityInterface{bgp.NewCapMultiProtocol(bgp.RF_IPv4_UC), bgp.NewCapFourOctetASNumber(s.AS), bgp.NewCapRouteRefresh()}
	open := bgp.NewBGPOpenMessage(as2, 90, s.Local.String(), []bgp.OptionParameterInterface{bgp.NewOptionParameterCapability(caps)})
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 64<<10)
	if err := writeMsg(c, open); err != nil {
		c.Close()
		return err
	}
	m, err := readMsg(br)
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
	if m, err = readMsg(br); err != nil || m.Header.Type != bgp.BGP_MSG_KEEPALIVE {
		c.Close()
		return fmt.Errorf("waiting for KEEPALIVE: %v (type %v)", err, m)
	}
	_ = c.SetDeadline(time.Time{})
	s.conn, s.br = c, br
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
	if s.ln != nil {
		s.ln.Close()
	}
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

// read counts the routes of the UPDATEs it receives. It decodes only
// what a route count needs (the prefixes), so that a thousand speakers
// in the harness's process cost the reflectors' measurement little.
func (s *Speaker) read() {
	defer close(s.done)
	for {
		b, err := readRaw(s.br)
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		switch b[18] {
		case bgp.BGP_MSG_UPDATE:
		case bgp.BGP_MSG_NOTIFICATION:
			if m, err := bgp.ParseBGPMessage(b); err == nil {
				n := m.Body.(*bgp.BGPNotification)
				err = fmt.Errorf("NOTIFICATION code %d subcode %d", n.ErrorCode, n.ErrorSubcode)
				s.mu.Lock()
				s.readErr = err
				s.mu.Unlock()
			}
			return
		default:
			continue
		}
		add, del, err := updatePrefixes(b[bgp.BGP_HEADER_LENGTH:])
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
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

// updatePrefixes reads the prefixes an UPDATE body announces and
// withdraws (the IPv4 fields, and MP_REACH_NLRI and MP_UNREACH_NLRI of
// IPv4 or IPv6 unicast).
func updatePrefixes(b []byte) (add, del []netip.Prefix, err error) {
	short := errors.New("short UPDATE")
	if len(b) < 2 {
		return nil, nil, short
	}
	wl := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+wl+2 {
		return nil, nil, short
	}
	if del, err = nlris(b[2:2+wl], false, del); err != nil {
		return nil, nil, err
	}
	b = b[2+wl:]
	al := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+al {
		return nil, nil, short
	}
	attrs := b[2 : 2+al]
	if add, err = nlris(b[2+al:], false, add); err != nil {
		return nil, nil, err
	}
	for len(attrs) >= 3 {
		flags, typ := bgp.BGPAttrFlag(attrs[0]), bgp.BGPAttrType(attrs[1])
		hl, n := 3, int(attrs[2])
		if flags&bgp.BGP_ATTR_FLAG_EXTENDED_LENGTH != 0 {
			if len(attrs) < 4 {
				return nil, nil, short
			}
			hl, n = 4, int(binary.BigEndian.Uint16(attrs[2:]))
		}
		if len(attrs) < hl+n {
			return nil, nil, short
		}
		v := attrs[hl : hl+n]
		attrs = attrs[hl+n:]
		switch typ {
		case bgp.BGP_ATTR_TYPE_MP_REACH_NLRI:
			if len(v) < 5 || len(v) < 5+int(v[3]) {
				return nil, nil, short
			}
			v6 := binary.BigEndian.Uint16(v) == bgp.AFI_IP6
			rest := v[4+int(v[3]):]
			if len(rest) < 1 {
				return nil, nil, short
			}
			if add, err = nlris(rest[1:], v6, add); err != nil { // after the reserved byte
				return nil, nil, err
			}
		case bgp.BGP_ATTR_TYPE_MP_UNREACH_NLRI:
			if len(v) < 3 {
				return nil, nil, short
			}
			if del, err = nlris(v[3:], binary.BigEndian.Uint16(v) == bgp.AFI_IP6, del); err != nil {
				return nil, nil, err
			}
		}
	}
	return add, del, nil
}

// nlris appends the prefixes of an NLRI field.
func nlris(b []byte, v6 bool, out []netip.Prefix) ([]netip.Prefix, error) {
	for len(b) > 0 {
		bits := int(b[0])
		n := (bits + 7) / 8
		if len(b) < 1+n || (!v6 && bits > 32) || bits > 128 {
			return out, errors.New("bad prefix in an UPDATE")
		}
		var a netip.Addr
		if v6 {
			var x [16]byte
			copy(x[:], b[1:1+n])
			a = netip.AddrFrom16(x)
		} else {
			var x [4]byte
			copy(x[:], b[1:1+n])
			a = netip.AddrFrom4(x)
		}
		out = append(out, netip.PrefixFrom(a, bits))
		b = b[1+n:]
	}
	return out, nil
}

func writeMsg(c net.Conn, m *bgp.BGPMessage) error {
	b, err := m.Serialize()
	if err != nil {
		return fmt.Errorf("encoding a BGP message: %w", err)
	}
	_, err = c.Write(b)
	return err
}

// readRaw reads one whole BGP message.
func readRaw(r *bufio.Reader) ([]byte, error) {
	hdr, err := r.Peek(bgp.BGP_HEADER_LENGTH)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < bgp.BGP_HEADER_LENGTH {
		return nil, errors.New("BGP message shorter than its header")
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// readMsg reads and decodes one whole BGP message.
func readMsg(r *bufio.Reader) (*bgp.BGPMessage, error) {
	buf, err := readRaw(r)
	if err != nil {
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
