package nstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// Sink records the UDP datagrams that reach a port of a namespace (IPv4
// and IPv6), by payload, with the source each came from.
type Sink struct {
	mu    sync.Mutex
	got   map[string]netip.Addr
	conns []net.PacketConn
}

// Listen starts a sink on port in run's namespace.
func Listen(run *nsexec.Runner, port int) (*Sink, error) {
	s := &Sink{got: map[string]netip.Addr{}}
	err := run.Do(func() error {
		for _, fam := range []string{"udp4", "udp6"} {
			c, err := net.ListenPacket(fam, ":"+strconv.Itoa(port))
			if err != nil {
				return fmt.Errorf("sink %s port %d: %w", fam, port, err)
			}
			s.conns = append(s.conns, c)
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, c := range s.conns {
		go s.read(c)
	}
	return s, nil
}

func (s *Sink) read(c net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, addr, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		ap, _ := netip.ParseAddrPort(addr.String())
		s.mu.Lock()
		s.got[string(buf[:n])] = ap.Addr().Unmap()
		s.mu.Unlock()
	}
}

// From returns the source of the datagram that carried payload, if one
// arrived.
func (s *Sink) From(payload string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.got[payload]
	return a, ok
}

// Close stops the sink.
func (s *Sink) Close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// SendUDPFrom sends one datagram from src, whatever addresses the
// namespace holds (the socket is transparent and bound with FREEBIND, as
// a privileged workload forging its source could), to dst:port.
func SendUDPFrom(run *nsexec.Runner, src, dst netip.Addr, port int, payload string) error {
	return run.Do(func() error {
		d := net.Dialer{
			LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					// IP_TRANSPARENT lets the route lookup take a source
					// the namespace does not hold; FREEBIND the bind.
					if src.Is4() {
						serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1),
							unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TRANSPARENT, 1))
					} else {
						serr = errors.Join(unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1),
							unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TRANSPARENT, 1))
					}
				})
				if err != nil {
					return err
				}
				return serr
			},
		}
		c, err := d.DialContext(context.Background(), family("udp", dst), netip.AddrPortFrom(dst, uint16(port)).String())
		if err != nil {
			return fmt.Errorf("udp from %s to %s: %w", src, dst, err)
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
}
