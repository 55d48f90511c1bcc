package scale

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// EtcdBinary is the system etcd the harness runs (Debian's etcd-server).
const EtcdBinary = "/usr/bin/etcd"

// Etcd is a cluster of etcd processes on loopback, each a member, with
// its data in a directory of its own.
type Etcd struct {
	Endpoints []string
	cmds      []*exec.Cmd
	exited    []chan struct{}
}

// StartEtcd runs members etcd processes (1 or 3) on free loopback ports,
// with the data and logs under dir, and waits until every member is
// healthy. Members sync to disk as production members do (no
// --unsafe-no-fsync): the figures include etcd's own writes.
func StartEtcd(dir string, members int) (*Etcd, error) {
	if _, err := os.Stat(EtcdBinary); err != nil {
		return nil, fmt.Errorf("etcd: %s not installed (Debian package etcd-server): %w", EtcdBinary, err)
	}
	type member struct{ name, client, peer string }
	ms := make([]member, members)
	var initial []string
	for i := range ms {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		ms[i] = member{fmt.Sprintf("m%d", i), fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)}
		initial = append(initial, ms[i].name+"="+ms[i].peer)
	}
	e := &Etcd{}
	for _, m := range ms {
		logf, err := os.Create(filepath.Join(dir, m.name+".log"))
		if err != nil {
			e.Stop()
			return nil, fmt.Errorf("etcd member %s: %w", m.name, err)
		}
		cmd := exec.Command(EtcdBinary, "--name", m.name, "--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--quota-backend-bytes", strconv.Itoa(8<<30), "--max-request-bytes", strconv.Itoa(10<<20))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			e.Stop()
			return nil, fmt.Errorf("running %s: %w", EtcdBinary, err)
		}
		logf.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		e.cmds = append(e.cmds, cmd)
		e.exited = append(e.exited, done)
		e.Endpoints = append(e.Endpoints, m.client)
	}
	for i, ep := range e.Endpoints {
		if err := waitHealthy(ep, e.exited[i]); err != nil {
			e.Stop()
			return nil, fmt.Errorf("etcd member %s (log in %s): %w", ms[i].name, dir, err)
		}
	}
	return e, nil
}

// run is one measurement's etcd: its members, a connection to write the
// cluster with, and the directory both live in.
type run struct {
	etcd *Etcd
	w    *etcdv3.Store
	dir  string
}

// startRun starts members etcd processes in a new directory under dir
// (named after prefix) and connects to them; stop undoes it all.
func startRun(ctx context.Context, dir, prefix string, members int) (*run, error) {
	d, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		return nil, fmt.Errorf("a directory for etcd: %w", err)
	}
	e, err := StartEtcd(d, members)
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	w, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: e.Endpoints})
	if err != nil {
		e.Stop()
		os.RemoveAll(d)
		return nil, err
	}
	return &run{etcd: e, w: w, dir: d}, nil
}

func (r *run) stop() {
	r.w.Close()
	r.etcd.Stop()
	os.RemoveAll(r.dir)
}

// Pids are the members' process ids.
func (e *Etcd) Pids() []int {
	var out []int
	for _, c := range e.cmds {
		out = append(out, c.Process.Pid)
	}
	return out
}

// Stop kills every member and waits for it.
func (e *Etcd) Stop() {
	for i, c := range e.cmds {
		_ = c.Process.Kill()
		<-e.exited[i]
	}
	e.cmds, e.exited = nil, nil
}

// Usage sums the members' CPU seconds and resident memory (MiB).
func (e *Etcd) Usage() (cpu, rss float64, err error) {
	for _, pid := range e.Pids() {
		c, err := ProcCPUSeconds(pid)
		if err != nil {
			return 0, 0, err
		}
		r, err := ProcRSSMiB(pid)
		if err != nil {
			return 0, 0, err
		}
		cpu, rss = cpu+c, rss+r
	}
	return cpu, rss, nil
}

// SentBytes sums, over the members, the bytes etcd sent to its gRPC
// clients (etcd_network_client_grpc_sent_bytes_total).
func (e *Etcd) SentBytes() (float64, error) {
	var total float64
	for _, ep := range e.Endpoints {
		v, err := metric(ep, "etcd_network_client_grpc_sent_bytes_total")
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// metric reads one unlabelled counter from a member's /metrics.
func metric(ep, name string) (float64, error) {
	resp, err := http.Get(ep + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("reading %s/metrics: %w", ep, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics: no %s", ep, name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHealthy polls a member's /health for 30 s.
func waitHealthy(ep string, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return errors.New("exited early")
		default:
		}
		if resp, err := hc.Get(ep + "/health"); err == nil {
			ok := resp.StatusCode == http.StatusOK
			resp.Body.Close()
			if ok {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not healthy within 30s")
}
