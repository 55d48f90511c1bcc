package scale

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdproxy"
)

// cacheProc is one fan-out cache (calico-etcd-proxy's server) running as
// a child process of the harness, so that its CPU and memory are its own.
type cacheProc struct {
	cmd      *exec.Cmd
	endpoint string
	exited   chan struct{}
}

// startCache runs a cache in front of etcd's endpoints on a free
// loopback port and waits until it serves.
func startCache(ctx context.Context, endpoints []string) (*cacheProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the harness binary: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleCache, etcdEnv+"="+strings.Join(endpoints, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a fan-out cache: %w", err)
	}
	c := &cacheProc{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			addr <- sc.Text()
		}
		close(addr)
		for sc.Scan() {
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			<-c.exited
			return nil, fmt.Errorf("the fan-out cache exited before serving")
		}
		c.endpoint = "http://" + a
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, fmt.Errorf("the fan-out cache did not serve within 30s")
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
	return c, nil
}

func (c *cacheProc) pid() int { return c.cmd.Process.Pid }

// stop ends the cache and waits for it.
func (c *cacheProc) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// runCache is the cache's process: calico-etcd-proxy on a free loopback
// port (in the clear: loopback only) until SIGTERM; it prints its address
// first.
func runCache(ctx context.Context, endpoints []string) error {
	s, err := etcdproxy.Start(ctx, etcdproxy.Config{Listen: "127.0.0.1:0", Upstream: etcdcore.Config{Endpoints: endpoints, DialTimeout: time.Minute}})
	if err != nil {
		return err
	}
	defer s.Stop()
	fmt.Println(s.Addr().String())
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.Done():
		return err
	}
}
