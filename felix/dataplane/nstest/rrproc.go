package nstest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// rrRoleEnv makes this binary, run again, one side of a request/response
// pair ("echo ADDR" or "rr DST DURATION PERCONN") or an opening prober
// ("probe DST LIMIT") instead of what it is.
const rrRoleEnv = "PALISADE_NSTEST_RR"

// init runs the role when this binary was started as one side of a pair
// (every test binary that imports nstest can be). The echo side says
// "ready" once it listens and ends when its stdin closes (the test
// ended); the client side prints its rate.
func init() {
	role := os.Getenv(rrRoleEnv)
	if role == "" {
		return
	}
	f := strings.Fields(role)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch {
	case len(f) == 2 && f[0] == "echo":
		s, err := serveEcho(f[1])
		if err != nil {
			fail(err)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = s.Close()
		os.Exit(0)
	case len(f) == 3 && f[0] == "probe":
		dst, err := netip.ParseAddrPort(f[1])
		if err != nil {
			fail(err)
		}
		limit, err := time.ParseDuration(f[2])
		if err != nil {
			fail(err)
		}
		if err := probeHere(dst, limit, os.Stdin); err != nil {
			fail(err)
		}
		os.Exit(0)
	case len(f) == 4 && f[0] == "rr":
		dst, err := netip.ParseAddrPort(f[1])
		if err != nil {
			fail(err)
		}
		d, err := time.ParseDuration(f[2])
		if err != nil {
			fail(err)
		}
		r, err := rrHere(dst, d, f[3] == "true")
		if err != nil {
			fail(err)
		}
		fmt.Println(strconv.FormatFloat(r, 'f', -1, 64))
		os.Exit(0)
	}
	fail(fmt.Errorf("%s=%q: not a role", rrRoleEnv, role))
}

// roleCmd is this binary as one side of a pair, started from run's
// namespace (which it inherits).
func roleCmd(ctx context.Context, role string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), rrRoleEnv+"="+role)
	return cmd, nil
}

// Echo is a process in run's namespace that serves request/response
// exchanges on addr (":port" for every address) until the listener is
// closed.
type Echo struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	once  sync.Once
	err   error
}

// StartEcho starts the echo process and waits until it listens.
func StartEcho(run *nsexec.Runner, addr string) (*Echo, error) {
	cmd, err := roleCmd(context.Background(), "echo "+addr)
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := run.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("starting the echo process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		stdin.Close()
		werr := cmd.Wait()
		return nil, fmt.Errorf("echo on %s: %v %v: %s", addr, err, werr, strings.TrimSpace(stderr.String()))
	}
	return &Echo{cmd: cmd, stdin: stdin}, nil
}

// Close ends the echo process.
func (e *Echo) Close() error {
	e.once.Do(func() {
		e.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- e.cmd.Wait() }()
		select {
		case e.err = <-done:
		case <-time.After(5 * time.Second):
			_ = e.cmd.Process.Kill()
			e.err = errors.Join(errors.New("echo process did not end; killed"), <-done)
		}
	})
	return e.err
}

// RR runs one-byte request/response exchanges from run's namespace to
// dst for d, on one connection or, with perConn, on a new connection
// each (connect-request-response), and returns their rate per second.
// The client is a process of its own (see the pair's description).
func RR(run *nsexec.Runner, dst netip.AddrPort, d time.Duration, perConn bool) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	cmd, err := roleCmd(ctx, fmt.Sprintf("rr %s %s %t", dst, d, perConn))
	if err != nil {
		return 0, err
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := run.Do(cmd.Run); err != nil {
		return 0, fmt.Errorf("request/response to %s: %w: %s", dst, err, strings.TrimSpace(stderr.String()))
	}
	return strconv.ParseFloat(strings.TrimSpace(stdout.String()), 64)
}
