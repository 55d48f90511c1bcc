package nstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// ProbeTimeout is how long a probe waits before calling traffic dropped.
var ProbeTimeout = 300 * time.Millisecond

// Server answers probes inside a namespace: TCP (writes the peer address
// it saw, then closes), UDP (echoes the peer address) on the given ports,
// and it records the raw SCTP packets that arrive.
type Server struct {
	closers []io.Closer
	mu      sync.Mutex
	sctp    map[string]time.Time // "srcIP:srcPort>dstPort"
	sctpFd  int
	// sctpDone is closed when readSCTP has returned: only then may the
	// descriptor be closed, or the kernel hands its number to the next
	// socket opened and the reader steals that socket's data.
	sctpDone chan struct{}
	closing  atomic.Bool
}

// Serve starts a server in run's namespace.
func Serve(run *nsexec.Runner, ports ...int) (*Server, error) {
	s := &Server{sctp: map[string]time.Time{}, sctpFd: -1, sctpDone: make(chan struct{})}
	err := run.Do(func() error {
		for _, p := range ports {
			if err := s.serve("tcp4", "udp4", p); err != nil {
				return err
			}
			// IPv6 too, on its own sockets (where the namespace has it).
			_ = s.serve("tcp6", "udp6", p)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_SCTP)
		if err != nil {
			return fmt.Errorf("raw SCTP socket: %w", err)
		}
		s.sctpFd = fd
		// Wake now and then, so Close never waits on a reader that a
		// shutdown did not wake.
		tv := syscall.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		return syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	go s.readSCTP()
	return s, nil
}

// serve answers TCP and UDP on port of one family.
func (s *Server) serve(tcp, udp string, p int) error {
	l, err := net.Listen(tcp, ":"+strconv.Itoa(p))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(c.RemoteAddr().String()))
			_ = c.Close()
		}
	}()
	u, err := net.ListenPacket(udp, ":"+strconv.Itoa(p))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, u)
	go func() {
		buf := make([]byte, 1500)
		for {
			_, addr, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = u.WriteTo([]byte(addr.String()), addr)
		}
	}()
	return nil
}

func (s *Server) readSCTP() {
	defer close(s.sctpDone)
	buf := make([]byte, 2048)
	for {
		n, _, err := syscall.Recvfrom(s.sctpFd, buf, 0)
		if (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR)) && !s.closing.Load() {
			continue
		}
		if err != nil || n == 0 {
			return // n == 0: Close shut the socket down
		}
		if n < 20+12 {
			continue
		}
		ihl := int(buf[0]&0xf) * 4
		src := netip.AddrFrom4([4]byte(buf[12:16]))
		sp, dp := binary.BigEndian.Uint16(buf[ihl:]), binary.BigEndian.Uint16(buf[ihl+2:])
		s.mu.Lock()
		s.sctp[fmt.Sprintf("%s:%d>%d", src, sp, dp)] = time.Now()
		s.mu.Unlock()
	}
}

// Close stops the server.
func (s *Server) Close() {
	for _, c := range s.closers {
		_ = c.Close()
	}
	if s.sctpFd >= 0 {
		s.closing.Store(true)
		_ = syscall.Shutdown(s.sctpFd, syscall.SHUT_RDWR)
		<-s.sctpDone
		_ = syscall.Close(s.sctpFd)
		s.sctpFd = -1
	}
}

// TCP connects from run's namespace to dst:port and returns the peer
// address the server saw.
func TCP(run *nsexec.Runner, dst netip.Addr, port int) (string, error) {
	var c net.Conn
	err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout(family("tcp", dst), netip.AddrPortFrom(dst, uint16(port)).String(), ProbeTimeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ProbeTimeout))
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// UDP sends a datagram from run's namespace to dst:port and returns the
// peer address the server echoed.
func UDP(run *nsexec.Runner, dst netip.Addr, port int) (string, error) {
	var c net.Conn
	err := run.Do(func() error {
		var err error
		c, err = net.Dial(family("udp", dst), netip.AddrPortFrom(dst, uint16(port)).String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ProbeTimeout))
	if _, err := c.Write([]byte("probe")); err != nil {
		return "", err
	}
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// family is the network name of proto for dst's address family.
func family(proto string, dst netip.Addr) string {
	if dst.Is6() && !dst.Is4In6() {
		return proto + "6"
	}
	return proto + "4"
}

// Checksum is the Internet checksum of b (RFC 1071).
func Checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// ICMP sends an ICMP message of type/code (8/0 is an echo request) from
// run's namespace and, for an echo request, waits for the reply. For other
// types it only sends.
func ICMP(run *nsexec.Runner, dst netip.Addr, typ, code uint8) error {
	fd, err := rawICMP(run)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	id := uint16(time.Now().UnixNano())
	msg := []byte{typ, code, 0, 0, byte(id >> 8), byte(id), 0, 1, 'p', 'r', 'o', 'b', 'e'}
	binary.BigEndian.PutUint16(msg[2:], Checksum(msg))
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet4{Addr: dst.As4()}); err != nil {
		return err
	}
	if typ != 8 {
		return nil
	}
	_, err = awaitEcho(fd, dst, id, ProbeTimeout)
	return err
}

// rawICMP opens a raw ICMP socket in run's namespace.
func rawICMP(run *nsexec.Runner) (int, error) {
	var fd int
	err := run.Do(func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
		return err
	})
	return fd, err
}

// awaitEcho waits up to timeout for the echo reply with id from dst on a
// raw ICMP socket and returns its size (IPv4 header included).
func awaitEcho(fd int, dst netip.Addr, id uint16, timeout time.Duration) (int, error) {
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	buf := make([]byte, 65536)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, fmt.Errorf("no echo reply from %s: %w", dst, err)
		}
		ihl := int(buf[0]&0xf) * 4
		if n >= ihl+8 && buf[ihl] == 0 && binary.BigEndian.Uint16(buf[ihl+4:]) == id {
			return n, nil
		}
	}
	return 0, fmt.Errorf("no echo reply from %s", dst)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SCTP sends a raw SCTP INIT from run's namespace to dst:port and reports
// whether srv saw it. The kernel has no SCTP sockets, but netfilter
// matches and tracks SCTP, so policy applies to these packets.
func SCTP(run *nsexec.Runner, srv *Server, src, dst netip.Addr, port int) error {
	var fd int
	err := run.Do(func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_SCTP)
		return err
	})
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	sport := uint16(20000 + time.Now().UnixNano()%40000)
	pkt := make([]byte, 12+20)
	binary.BigEndian.PutUint16(pkt[0:], sport)
	binary.BigEndian.PutUint16(pkt[2:], uint16(port))
	// INIT chunk: type 1, length 20, initiate tag, a_rwnd, streams, TSN.
	pkt[12] = 1
	binary.BigEndian.PutUint16(pkt[14:], 20)
	binary.BigEndian.PutUint32(pkt[16:], 0x1234abcd)
	binary.BigEndian.PutUint32(pkt[20:], 65535)
	binary.BigEndian.PutUint16(pkt[24:], 1)
	binary.BigEndian.PutUint16(pkt[26:], 1)
	binary.BigEndian.PutUint32(pkt[28:], 1)
	binary.LittleEndian.PutUint32(pkt[8:], crc32.Checksum(pkt, castagnoli))
	if err := syscall.Sendto(fd, pkt, 0, &syscall.SockaddrInet4{Addr: dst.As4()}); err != nil {
		return err
	}
	key := fmt.Sprintf("%s:%d>%d", src, sport, port)
	deadline := time.Now().Add(ProbeTimeout)
	for time.Now().Before(deadline) {
		srv.mu.Lock()
		_, ok := srv.sctp[key]
		srv.mu.Unlock()
		if ok {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("SCTP packet not received")
}
