package nstest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// The opening prober finds when a TCP path opens, to a fraction of a
// millisecond, from a process of its own in the client's namespace (this
// binary run again, like the request/response pair): in the test's
// process it shared Go's scheduler with felix and its datastore, and on
// two cores an answer waited up to milliseconds for a processor before
// it was seen.
//
// Once told to go, it starts a connection from a fresh non-blocking
// socket every probeEvery without waiting for the ones before, and waits
// for answers in poll between them, so the first SYN-ACK is taken as it
// arrives. A connection whose SYN was dropped is never retried by the
// kernel within the prober's time (the first SYN retransmission is after
// a second): each probe is one SYN, closed once it waited probeGiveUp.
// The time of the first established connection is CLOCK_MONOTONIC, which
// every process on the machine shares.

const (
	probeEvery = 250 * time.Microsecond
	// probeGiveUp closes a probe whose SYN got no answer: a live path
	// answers within a millisecond even on a busy machine.
	probeGiveUp = 30 * time.Millisecond
	probeBatch  = 64
)

// Monotonic is CLOCK_MONOTONIC now, as the prober stamps its answer.
func Monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Prober is a prober process waiting to go.
type Prober struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	cancel context.CancelFunc
}

// StartProber starts a prober in run's namespace for dst and waits
// until it is ready (its sockets made); it probes for at most limit once
// told to go.
func StartProber(run *nsexec.Runner, dst netip.AddrPort, limit time.Duration) (*Prober, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	cmd, err := roleCmd(ctx, fmt.Sprintf("probe %s %s", dst, limit))
	if err != nil {
		cancel()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := run.Do(cmd.Start); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the prober: %w", err)
	}
	p := &Prober{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), cancel: cancel}
	if line, err := p.stdout.ReadString('\n'); strings.TrimSpace(line) != "ready" {
		p.Close()
		return nil, fmt.Errorf("prober of %s: %v: %s", dst, err, strings.TrimSpace(stderr.String()))
	}
	return p, nil
}

// Go starts the probing.
func (p *Prober) Go() error {
	_, err := io.WriteString(p.stdin, "go\n")
	return err
}

// Opened waits for the prober's verdict: when (CLOCK_MONOTONIC) the
// first connection was answered, or ok false when none was within its
// limit.
func (p *Prober) Opened() (at time.Duration, ok bool, err error) {
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		return 0, false, fmt.Errorf("reading the prober: %w", err)
	}
	line = strings.TrimSpace(line)
	if line == "timeout" {
		return 0, false, nil
	}
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("prober said %q", line)
	}
	return time.Duration(ns), true, nil
}

// Close ends the prober.
func (p *Prober) Close() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cancel()
}

// probeHere is the prober process: "ready" once its first sockets are
// made, then, after "go" on stdin, probes dst until a connection is
// answered (it prints the CLOCK_MONOTONIC time in ns) or limit passed
// ("timeout").
func probeHere(dst netip.AddrPort, limit time.Duration, in io.Reader) error {
	if !dst.Addr().Is4() {
		return fmt.Errorf("probe %s: IPv4 only", dst)
	}
	runtime.LockOSThread()
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	var spare []int
	type waiting struct {
		fd   int
		sent time.Duration
	}
	var open []waiting
	defer func() {
		for _, fd := range spare {
			unix.Close(fd)
		}
		for _, w := range open {
			unix.Close(w.fd)
		}
	}()
	refill := func() error {
		for range probeBatch {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			spare = append(spare, fd)
		}
		return nil
	}
	if err := refill(); err != nil {
		return err
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(in).ReadString('\n'); strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	start := Monotonic()
	nextSend := start
	fds := make([]unix.PollFd, 0, 256)
	for {
		now := Monotonic()
		if now-start > limit {
			fmt.Println("timeout")
			return nil
		}
		if now >= nextSend {
			if len(spare) == 0 {
				if err := refill(); err != nil {
					return err
				}
			}
			fd := spare[len(spare)-1]
			spare = spare[:len(spare)-1]
			if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
				unix.Close(fd)
				return err
			}
			open = append(open, waiting{fd: fd, sent: now})
			nextSend = now + probeEvery
		}
		fds = fds[:0]
		for _, w := range open {
			fds = append(fds, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLOUT})
		}
		wait := unix.NsecToTimespec(int64(max(nextSend-Monotonic(), 0)))
		if _, err := unix.Ppoll(fds, &wait, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		answered := Monotonic()
		kept := open[:0]
		for i, w := range open {
			switch {
			case fds[i].Revents != 0:
				if soErr, err := unix.GetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr == 0 {
					fmt.Println(int64(answered))
					return nil
				}
				unix.Close(w.fd)
			case answered-w.sent > probeGiveUp:
				unix.Close(w.fd)
			default:
				kept = append(kept, w)
			}
		}
		open = kept
	}
}
