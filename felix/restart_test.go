package felix

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/endpointstatus"
	"github.com/palisade-net/palisade/libcalico/names"
)

// childEnv carries the felix a TestFelixChild process runs.
const childEnv = "PALISADE_FELIX_CHILD"

type childArgs struct {
	NetNS, StatusDir string
	Endpoints        []string
	// Environ is felix's FELIX_ environment; Services feeds it
	// ctlbServices.
	Environ  []string
	Services bool
}

// TestFelixChild is not a test: it is felix in a process of its own, for
// the restart test to kill with SIGKILL. Without childEnv it skips.
func TestFelixChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("felix for the restart test (" + childEnv + " unset)")
	}
	var a childArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	store := etcdtest.NewStore(t, a.Endpoints)
	log.SetLevel(log.InfoLevel)
	cfg := Config{NodeName: nodeName, Store: store, NetNS: a.NetNS, StatusDir: a.StatusDir, Environ: a.Environ}
	if a.Services {
		feed := &sliceFeed{c: make(chan []calc.Update)}
		cfg.EndpointSlices = feed
		go ctlbServices(feed)
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// startChild runs felix in a process of its own on the cluster's node.
func (c *cluster) startChild(t *testing.T, logName string) *exec.Cmd {
	t.Helper()
	return c.startChildWith(t, logName, childArgs{})
}

// startChildWith is startChild with more of childArgs (Environ, Services).
func (c *cluster) startChildWith(t *testing.T, logName string, a childArgs) *exec.Cmd {
	t.Helper()
	a.NetNS, a.StatusDir, a.Endpoints = c.node.Path(), c.statusDir, c.endpoints
	args, _ := json.Marshal(a)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFelixChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+string(args))
	out, err := os.Create(filepath.Join(t.TempDir(), logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s:\n%s", logName, b)
		}
	})
	return cmd
}

// udpStream sends numbered datagrams from one namespace to a listener in
// another, one every period, and tells which numbers arrived.
type udpStream struct {
	conn     net.Conn
	listener net.PacketConn
	mu       sync.Mutex
	sent     int
	got      map[uint32]bool
	stop     chan struct{}
	done     sync.WaitGroup
}

func startStream(t *testing.T, from, to *nsexec.Runner, dst netip.Addr, port int, period time.Duration) *udpStream {
	t.Helper()
	s := &udpStream{got: map[uint32]bool{}, stop: make(chan struct{})}
	if err := to.Do(func() error {
		var err error
		s.listener, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := from.Do(func() error {
		var err error
		s.conn, err = net.Dial("udp4", netip.AddrPortFrom(dst, uint16(port)).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.done.Add(2)
	go func() {
		defer s.done.Done()
		buf := make([]byte, 64)
		for {
			n, _, err := s.listener.ReadFrom(buf)
			if err != nil {
				return
			}
			if n >= 4 {
				s.mu.Lock()
				s.got[binary.BigEndian.Uint32(buf)] = true
				s.mu.Unlock()
			}
		}
	}()
	go func() {
		defer s.done.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		buf := make([]byte, 4)
		for i := uint32(0); ; i++ {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			binary.BigEndian.PutUint32(buf, i)
			_, _ = s.conn.Write(buf)
			s.mu.Lock()
			s.sent++
			s.mu.Unlock()
		}
	}()
	return s
}

// finish stops sending, waits for the last datagrams and returns how many
// were sent and which numbers never arrived.
func (s *udpStream) finish() (int, []uint32) {
	close(s.stop)
	time.Sleep(200 * time.Millisecond)
	s.listener.Close()
	s.conn.Close()
	s.done.Wait()
	var lost []uint32
	for i := 0; i < s.sent; i++ {
		if !s.got[uint32(i)] {
			lost = append(lost, uint32(i))
		}
	}
	return s.sent, lost
}

// stageIDs are the policy program IDs of an interface's stages.
func (c *cluster) stageIDs(iface string) []uint32 {
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	ifs, _ := v.Interfaces()
	for _, in := range ifs {
		if in.Name == iface {
			var out []uint32
			for _, s := range in.Stages {
				if s != nil {
					out = append(out, uint32(s.Program))
				}
			}
			return out
		}
	}
	return nil
}

// waitProgrammedSince waits until felix reported an endpoint programmed
// after t0 (a restarted felix writes every status again once it applied).
func (c *cluster) waitProgrammedSince(ns, pod string, t0 time.Time) {
	c.t.Helper()
	wep := names.WorkloadEndpointName(nodeName, "k8s", pod, "eth0")
	c.waitFor("the restarted felix's apply", func() bool {
		st, err := endpointstatus.Read(c.statusDir, ns, wep)
		return err == nil && st.Programmed.After(t0)
	})
}

const restartPolicy = `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web-in, namespace: ns-a}
spec:
  selector: app == 'web'
  ingress:
  - {action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}
  - {action: Allow, protocol: UDP, source: {selector: app == 'client'}, destination: {ports: [9100]}}
`

// TestBPFRestart kills felix (SIGKILL) while a stream of datagrams flows
// between two pods: policy holds while no felix runs, the stream loses
// nothing, and the next felix adopts the programs in place (the same
// program IDs) and then enforces changes again.
func TestBPFRestart(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	first := c.startChild(t, "felix-1.log")
	setupPods(c)
	rs := c.apply(restartPolicy)
	c.waitPolicies(rs, true)
	c.expect(allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), deny("other", "web", "tcp", 8080))
	web := c.pods["web"]
	before := c.stageIDs(web.iface)
	if len(before) == 0 {
		t.Fatal("web has no programs")
	}
	stream := startStream(t, c.pods["client"].run, web.run, web.ip, 9100, time.Millisecond)
	time.Sleep(100 * time.Millisecond)

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	// No felix: the programs in the kernel still decide.
	c.expect(allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), deny("other", "web", "tcp", 8080))

	restarted := time.Now()
	c.startChild(t, "felix-2.log")
	c.waitProgrammedSince("ns-a", "web", restarted)
	time.Sleep(100 * time.Millisecond)
	sent, lost := stream.finish()
	if len(lost) > 0 {
		t.Errorf("%d of %d datagrams lost across the restart: %v", len(lost), sent, lost)
	}
	if after := c.stageIDs(web.iface); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("web's programs were replaced by the restarted felix: %v, then %v", before, after)
	}
	// The new felix enforces a change.
	c.remove(rs)
	c.waitPolicies(rs, false)
	c.expect(allow("other", "web", "tcp", 8080))
}
