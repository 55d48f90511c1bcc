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
)

// The request/response pair below works as netperf's TCP_RR does: each
// side is a process of its own (this binary run again, see init), one
// thread on its socket that polls briefly and then blocks (spinRead), so
// between two packets nothing runs but the kernel's path (and the
// dataplane's work on it).
// In the test's process, Go's poller parked and woke a goroutine on every
// packet, and a thread back from a blocking read waited for a processor
// that felix (which the benchmarks run in-process) held: on two cores
// that varied more than the path's own cost.
//
// Both sides' threads run at the highest priority of the normal
// scheduling class (favour): on a machine busy with
// other work, a thread that yields while it polls would otherwise give
// the processor to that work for a time slice, and the rate measured was
// the scheduler's, the same whatever path the packets took. The packets'
// path (softirq, the dataplane's programs or netfilter) runs in the
// sending thread as before, and other work still runs.

// rrTimeout bounds a connect and every read and write of the pair: a
// path that stops answering fails the run instead of hanging it.
const rrTimeout = 5 * time.Second

// echoServer sends every byte it receives back, on each connection
// (in the echo process).
type echoServer struct {
	fd int

	mu     sync.Mutex
	conns  map[int]bool
	closed bool
	wg     sync.WaitGroup
}

// serveEcho serves request/response exchanges on addr (":port" for every
// address) in this process's namespace until Close.
func serveEcho(addr string) (*echoServer, error) {
	sa, err := sockaddr(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err == nil {
		if err = unix.Bind(fd, sa); err == nil {
			err = unix.Listen(fd, 128)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("echo on %s: %w", addr, err)
	}
	s := &echoServer{fd: fd, conns: map[int]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *echoServer) accept() {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	favour()
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
func (s *echoServer) serve(c int) {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	favour()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		unix.Close(c)
	}()
	buf := make([]byte, 4096)
	for {
		n, err := spinRead(c, buf, time.Time{})
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
func (s *echoServer) Close() error {
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

// rrHere runs RR's exchanges from this process's namespace.
func rrHere(dst netip.AddrPort, d time.Duration, perConn bool) (float64, error) {
	if !dst.Addr().Is4() {
		return 0, fmt.Errorf("request/response to %s: IPv4 only", dst)
	}
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	favour()
	buf := []byte{'x'}
	exchange := func(c int) error {
		if err := writeAll(c, buf); err != nil {
			return err
		}
		n, err := spinRead(c, buf, time.Now().Add(rrTimeout))
		switch {
		case err != nil:
			return fmt.Errorf("reading the answer: %w", err)
		case n == 0:
			return errors.New("reading the answer: connection closed")
		}
		return nil
	}
	var c int
	var err error
	if !perConn {
		if c, err = dial(sa); err != nil {
			return 0, err
		}
		defer unix.Close(c)
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if perConn {
			if c, err = dial(sa); err != nil {
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

// dial connects a blocking socket.
func dial(sa *unix.SockaddrInet4) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
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

// favour gives the calling thread (nice is per thread on Linux) the
// highest priority of the normal scheduling class, nice -20; where that
// is not permitted it keeps its own. Binding both sides to one processor
// as well was tried (2026-12-07): a Service pair's ratio spread as much
// from run to run, and a new connection per transaction then waited for
// the client's poll to end before the server's new thread ran.
func favour() {
	_ = unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
}

// spinFor is how long spinRead polls before it blocks: far longer than
// an answer on a live path takes, far shorter than an idle connection
// lasts.
const spinFor = 500 * time.Microsecond

// spinRead reads what fd has. It first polls without sleeping (a read
// that finds nothing yields the CPU to whatever else is runnable and
// tries again), so an answer is taken as soon as it is there, without
// the sleep and wake-up a blocking read costs (on a virtual machine tens
// of microseconds, more than the path measured); after spinFor it blocks
// instead, so an idle connection costs no CPU. It gives up at deadline
// (none when zero).
func spinRead(fd int, buf []byte, deadline time.Time) (int, error) {
	spinUntil := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			return n, nil
		case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			return 0, err
		}
		if i%64 != 63 {
			_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		now := time.Now()
		if !deadline.IsZero() && now.After(deadline) {
			return 0, unix.ETIMEDOUT
		}
		if now.Before(spinUntil) {
			continue
		}
		wait := -1
		if !deadline.IsZero() {
			wait = int(deadline.Sub(now).Milliseconds()) + 1
		}
		if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, wait); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, err
		}
	}
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
