package nstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// The request/response pair below works as netperf's TCP_RR does: each
// side is a thread blocked in the kernel on its socket, so between two
// packets nothing runs but the kernel's path (and the dataplane's work on
// it). Go's poller would park and wake a goroutine on every packet, which
// on a two-core machine added more variance than the path's own cost.

// rrTimeout bounds a connect and every read and write of the pair: a
// path that stops answering fails the run instead of hanging it.
const rrTimeout = 5 * time.Second

// EchoServer sends every byte it receives back, on each connection.
type EchoServer struct {
	fd int

	mu     sync.Mutex
	conns  map[int]bool
	closed bool
	wg     sync.WaitGroup
}

// Echo serves request/response exchanges on addr (":port" for every
// address) in run's namespace until Close.
func Echo(run *nsexec.Runner, addr string) (*EchoServer, error) {
	sa, err := sockaddr(addr)
	if err != nil {
		return nil, err
	}
	var fd int
	if err := run.Do(func() error {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err == nil {
			if err = unix.Bind(fd, sa); err == nil {
				err = unix.Listen(fd, 128)
			}
		}
		if err != nil {
			unix.Close(fd)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("echo on %s: %w", addr, err)
	}
	s := &EchoServer{fd: fd, conns: map[int]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *EchoServer) accept() {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		c, _, err := unix.Accept4(s.fd, unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			unix.Close(c)
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve echoes one connection until its peer closes it or Close.
func (s *EchoServer) serve(c int) {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		unix.Close(c)
	}()
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(c, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		if writeAll(c, buf[:n]) != nil {
			return
		}
	}
}

// Close stops serving: the listener and every connection are shut down
// (which wakes their threads) and closed.
func (s *EchoServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
	for c := range s.conns {
		_ = unix.Shutdown(c, unix.SHUT_RDWR)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return unix.Close(s.fd)
}

// RR runs one-byte request/response exchanges from run's namespace to
// dst for d, on one connection or, with perConn, on a new connection
// each (connect-request-response), and returns their rate per second.
func RR(run *nsexec.Runner, dst netip.AddrPort, d time.Duration, perConn bool) (float64, error) {
	if !dst.Addr().Is4() {
		return 0, fmt.Errorf("request/response to %s: IPv4 only", dst)
	}
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := []byte{'x'}
	exchange := func(c int) error {
		if err := writeAll(c, buf); err != nil {
			return err
		}
		for {
			n, err := unix.Read(c, buf)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return fmt.Errorf("reading the answer: %w", err)
			case n == 0:
				return errors.New("reading the answer: connection closed")
			}
			return nil
		}
	}
	var c int
	var err error
	if !perConn {
		if c, err = dial(run, sa); err != nil {
			return 0, err
		}
		defer unix.Close(c)
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if perConn {
			if c, err = dial(run, sa); err != nil {
				return 0, err
			}
		}
		err = exchange(c)
		if perConn {
			unix.Close(c)
		}
		if err != nil {
			return 0, fmt.Errorf("request/response to %s: %w", dst, err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// dial connects a blocking socket made in run's namespace.
func dial(run *nsexec.Runner, sa *unix.SockaddrInet4) (int, error) {
	var fd int
	err := run.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return 0, err
	}
	tv := unix.NsecToTimeval(rrTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			unix.Close(fd)
			return 0, err
		}
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		unix.Close(fd)
		return 0, err
	}
	for {
		err = unix.Connect(fd, sa)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("connecting to %s:%d: %w", net.IP(sa.Addr[:]), sa.Port, err)
	}
	return fd, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// sockaddr parses "host:port" or ":port" (every address) as IPv4.
func sockaddr(addr string) (*unix.SockaddrInet4, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port of %q: %w", addr, err)
	}
	sa := &unix.SockaddrInet4{Port: int(p)}
	if host != "" {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("address of %q: want IPv4", addr)
		}
		sa.Addr = a.As4()
	}
	return sa, nil
}
