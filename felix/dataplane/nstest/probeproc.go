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
	"sync"
	"time"
	"unsafe"

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
// for answers in poll between them. A connection whose SYN was dropped is
// never retried by the kernel within the prober's time (the first SYN
// retransmission is after a second): each probe is one SYN, closed once
// it waited probeGiveUp. The path is open when a connection is
// established; when it opened is the time the kernel received the first
// SYN-ACK from dst (a packet socket's receive timestamp, which the
// prober's own wake-up, waiting for a processor on a busy machine, does
// not delay), in CLOCK_REALTIME, which every process shares (Clock).

const (
	probeEvery = 250 * time.Microsecond
	// probeGiveUp closes a probe whose SYN got no answer: a live path
	// answers within a millisecond even on a busy machine.
	probeGiveUp = 30 * time.Millisecond
	probeBatch  = 64
)

// Clock is the time as the prober stamps an answer: CLOCK_REALTIME, in
// ns since the epoch.
func Clock() time.Duration { return time.Duration(time.Now().UnixNano()) }

// Prober is a prober process waiting to go.
type Prober struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	cancel context.CancelFunc
	// stderr is the process's standard error: read only once it ended
	// (after Close), when exec's copy of it is done.
	stderr strings.Builder
	once   sync.Once
	// ended is how the process ended (Close).
	ended error
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
	p := &Prober{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), cancel: cancel}
	cmd.Stderr = &p.stderr
	if err := run.Do(cmd.Start); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the prober: %w", err)
	}
	if line, err := p.stdout.ReadString('\n'); strings.TrimSpace(line) != "ready" {
		return nil, p.failed(fmt.Errorf("prober of %s not ready: said %q: %w", dst, line, err))
	}
	return p, nil
}

// failed ends the process and returns err with how the process ended and
// what it wrote to its standard error: a prober that failed says why
// there, and reading its pipes only shows that it is gone.
func (p *Prober) failed(err error) error {
	p.Close()
	return fmt.Errorf("%w (prober process: %v; its stderr: %q)", err, p.ended, strings.TrimSpace(p.stderr.String()))
}

// Go starts the probing.
func (p *Prober) Go() error {
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		return p.failed(fmt.Errorf("telling the prober to go: %w", err))
	}
	return nil
}

// Opened waits for the prober's verdict: when (Clock) the path opened,
// or ok false when it did not within the prober's limit.
func (p *Prober) Opened() (at time.Duration, ok bool, err error) {
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		return 0, false, p.failed(fmt.Errorf("reading the prober: %w", err))
	}
	line = strings.TrimSpace(line)
	if line == "timeout" {
		return 0, false, nil
	}
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return 0, false, p.failed(fmt.Errorf("prober said %q", line))
	}
	return time.Duration(ns), true, nil
}

// Close ends the prober (again: nothing).
func (p *Prober) Close() {
	p.once.Do(func() {
		p.stdin.Close()
		done := make(chan struct{})
		go func() { p.ended = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		p.cancel()
	})
}

// probeHere is the prober process: "ready" once its first sockets are
// made, then, after "go" on stdin, probes dst until a connection is
// answered (it prints when the first SYN-ACK arrived, Clock in ns) or
// limit passed ("timeout").
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
	arrivals, err := newSynAckWatch(dst)
	if err != nil {
		return err
	}
	defer arrivals.close()
	fmt.Println("ready")
	if line, err := bufio.NewReader(in).ReadString('\n'); strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	start := Clock()
	nextSend := start
	fds := make([]unix.PollFd, 0, 256)
	for {
		now := Clock()
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
		wait := unix.NsecToTimespec(int64(max(nextSend-Clock(), 0)))
		if _, err := unix.Ppoll(fds, &wait, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		seen := Clock()
		kept := open[:0]
		for i, w := range open {
			switch {
			case fds[i].Revents != 0:
				if soErr, err := unix.GetsockoptInt(w.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr == 0 {
					at := arrivals.first()
					if at == 0 || at > seen {
						at = seen // no timestamp: when it was seen
					}
					fmt.Println(int64(at))
					return nil
				}
				unix.Close(w.fd)
			case seen-w.sent > probeGiveUp:
				unix.Close(w.fd)
			default:
				kept = append(kept, w)
			}
		}
		open = kept
	}
}

// synAckWatch reads the SYN-ACKs from a server as the namespace's
// interfaces receive them, with the kernel's receive timestamps (a packet
// socket with SO_TIMESTAMPNS).
type synAckWatch struct {
	fd  int
	src [4]byte
	sp  uint16
}

func newSynAckWatch(from netip.AddrPort) (*synAckWatch, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	return &synAckWatch{fd: fd, src: from.Addr().As4(), sp: from.Port()}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// first drains what was received and returns the receive time (Clock) of
// the first SYN-ACK from the server, 0 when none came.
func (w *synAckWatch) first() time.Duration {
	buf, oob := make([]byte, 128), make([]byte, 128)
	var first time.Duration
	for {
		n, oobn, _, from, err := unix.Recvmsg(w.fd, buf, oob, unix.MSG_DONTWAIT)
		if err != nil {
			return first
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		p := buf[:n]
		if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_TCP || [4]byte(p[12:16]) != w.src {
			continue
		}
		l4 := int(p[0]&0xf) * 4
		if len(p) < l4+14 || uint16(p[l4])<<8|uint16(p[l4+1]) != w.sp || p[l4+13]&0x12 != 0x12 {
			continue
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				if t := time.Duration(ts.Nano()); first == 0 || t < first {
					first = t
				}
			}
		}
	}
}

func (w *synAckWatch) close() { unix.Close(w.fd) }
