package bench

import (
	"errors"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// synProber finds when a TCP path opens, to a fraction of a millisecond:
// it starts a connection from a fresh socket every probeEvery without
// waiting for the ones before, and the first one answered marks the
// opening. A connection whose SYN was dropped is never retried by the
// kernel within the benchmark's time (the first SYN retransmission is
// after a second), so each probe is one SYN; it is closed once it has
// waited long enough to be sure no answer is coming.
//
// Sockets are made in the probing namespace in batches (entering a
// namespace costs a thread switch and two setns calls) and connected from
// here: a socket belongs to the namespace it was made in.
//
// The prober never blocks in a system call: a goroutine that does keeps
// its processor until the runtime takes it back, which on this two-core
// machine held felix's own goroutines back by milliseconds. It sleeps on
// a timerfd through the runtime's poller instead (Go's own timers wake
// no sooner than a millisecond) and checks its sockets without waiting,
// so an answer is seen within one tick of arriving.
type synProber struct {
	run     *nsexec.Runner
	dst     unix.SockaddrInet4
	spare   []int      // made, not yet connected
	waiting []waitSock // connected, no answer yet
}

type waitSock struct {
	fd   int
	sent time.Time
}

const (
	probeEvery = 250 * time.Microsecond
	// probeGiveUp closes a probe whose SYN got no answer: a live path
	// answers within a millisecond even on a busy machine.
	probeGiveUp = 30 * time.Millisecond
	probeBatch  = 64
)

func newSYNProber(run *nsexec.Runner, dst netip.AddrPort) *synProber {
	return &synProber{run: run, dst: unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}}
}

// refill makes a batch of non-blocking sockets in the prober's namespace.
func (p *synProber) refill() error {
	return p.run.Do(func() error {
		for range probeBatch {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			p.spare = append(p.spare, fd)
		}
		return nil
	})
}

// send starts one connection.
func (p *synProber) send() error {
	if len(p.spare) == 0 {
		if err := p.refill(); err != nil {
			return err
		}
	}
	fd := p.spare[len(p.spare)-1]
	p.spare = p.spare[:len(p.spare)-1]
	if err := unix.Connect(fd, &p.dst); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return err
	}
	p.waiting = append(p.waiting, waitSock{fd: fd, sent: time.Now()})
	return nil
}

// answered checks, without waiting, whether a probe was answered. A
// probe refused or given up is closed.
func (p *synProber) answered() (bool, error) {
	fds := make([]unix.PollFd, len(p.waiting))
	for i, w := range p.waiting {
		fds[i] = unix.PollFd{Fd: int32(w.fd), Events: unix.POLLOUT}
	}
	if _, err := unix.Poll(fds, 0); err != nil && !errors.Is(err, unix.EINTR) {
		return false, err
	}
	now := time.Now()
	kept := p.waiting[:0]
	established := false
	for i, w := range p.waiting {
		switch {
		case fds[i].Revents != 0:
			if soErr, err := unix.GetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr == 0 {
				established = true
			}
			unix.Close(w.fd)
		case now.Sub(w.sent) > probeGiveUp:
			unix.Close(w.fd)
		default:
			kept = append(kept, w)
		}
	}
	p.waiting = kept
	return established, nil
}

// close closes every socket the prober holds.
func (p *synProber) close() {
	for _, fd := range p.spare {
		unix.Close(fd)
	}
	for _, w := range p.waiting {
		unix.Close(w.fd)
	}
	p.spare, p.waiting = nil, nil
}

// ticker returns a file that becomes readable every d: a timerfd read
// through the runtime's poller.
func ticker(d time.Duration) (*os.File, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	every := unix.NsecToTimespec(d.Nanoseconds())
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: every, Value: every}, nil); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "probe-ticker"), nil
}

// firstAnswer probes dst until a connection is established and returns
// when its answer was seen, counted from start.
func firstAnswer(run *nsexec.Runner, dst netip.AddrPort, start time.Time, limit time.Duration) (time.Duration, bool) {
	p := newSYNProber(run, dst)
	defer p.close()
	if err := p.refill(); err != nil {
		return 0, false
	}
	ticks, err := ticker(probeEvery)
	if err != nil {
		return 0, false
	}
	defer ticks.Close()
	expirations := make([]byte, 8)
	for time.Since(start) < limit {
		if err := p.send(); err != nil {
			return 0, false
		}
		if _, err := ticks.Read(expirations); err != nil {
			return 0, false
		}
		ok, err := p.answered()
		if err != nil {
			return 0, false
		}
		if ok {
			return time.Since(start), true
		}
	}
	return 0, false
}
