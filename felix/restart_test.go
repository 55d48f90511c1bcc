package felix

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/endpointstatus"
	"github.com/palisade-net/palisade/libcalico/names"
)

// childEnv carries the felix a TestFelixChild process runs.
const childEnv = "PALISADE_FELIX_CHILD"

type childArgs struct {
	NetNS, StatusDir string
	Endpoints        []string
	// Environ is felix's FELIX_ environment; CTLBServices feeds it
	// ctlbServices.
	Environ      []string
	CTLBServices bool
	// Services and Slices, when any, are the child's EndpointSlices
	// source (given once, then synced).
	Services map[string]*calc.Service
	Slices   map[string]*calc.EndpointSlice
}

// staticSlices is an EndpointSlices source of fixed Services and slices
// (by "namespace/name").
type staticSlices struct {
	services map[string]*calc.Service
	slices   map[string]*calc.EndpointSlice
}

func (s staticSlices) Run(ctx context.Context, out func([]calc.Update)) {
	var us []calc.Update
	key := func(kind, nsName string) datastore.Key {
		ns, name, _ := strings.Cut(nsName, "/")
		return datastore.Key{Kind: kind, Namespace: ns, Name: name}
	}
	for k, v := range s.services {
		us = append(us, calc.Update{Key: key(calc.KindService, k), Value: v})
	}
	for k, v := range s.slices {
		us = append(us, calc.Update{Key: key(calc.KindEndpointSlice, k), Value: v})
	}
	us = append(us, calc.Update{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}})
	out(us)
	<-ctx.Done()
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
	switch {
	case a.CTLBServices:
		feed := &sliceFeed{c: make(chan []calc.Update)}
		cfg.EndpointSlices = feed
		go ctlbServices(feed)
	case len(a.Services)+len(a.Slices) > 0:
		cfg.EndpointSlices = staticSlices{services: a.Services, slices: a.Slices}
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// startChild runs felix in a process of its own on the cluster's node.
func (c *cluster) startChild(t *testing.T, logName string) *exec.Cmd {
	return c.startChildWith(t, logName, childArgs{})
}

// startChildWith is startChild with more of childArgs (Environ,
// Services).
func (c *cluster) startChildWith(t *testing.T, logName string, a childArgs) *exec.Cmd {
	t.Helper()
	a.NetNS, a.StatusDir, a.Endpoints = c.node.Path(), c.statusDir, c.endpoints
	// The cluster's featureDetectOverride (bpfNoTCX, bpfNoLoop) first.
	a.Environ = append(c.felixConfigOf().Environ, a.Environ...)
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
	ids, _ := c.stageView(iface, nil)
	return ids
}

// stageView reads an interface's stages: their policy programs' IDs and
// whether each is a policy engine stub; with mem, it hands mem the
// engine's memory (mapped read-only) too.
func (c *cluster) stageView(iface string, mem func(policy.Mem)) (ids []uint32, stubs []bool) {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	ifs, _ := v.Interfaces()
	for _, in := range ifs {
		if in.Name != iface {
			continue
		}
		for _, s := range in.Stages {
			if s != nil {
				ids = append(ids, uint32(s.Program))
				stubs = append(stubs, s.Desc != nil && s.Desc.Engine)
			}
		}
	}
	if mem != nil {
		m, err := v.PolicyMemory()
		if err != nil {
			c.t.Fatal(err)
		}
		defer m.Close()
		mem(m)
	}
	return ids, stubs
}

// engineStages checks that every stage of iface is a policy engine stage
// (a stub) and returns the generation whose pages the engine's memory
// holds, 0 unless there is exactly one.
func (c *cluster) engineStages(iface string) uint16 {
	c.t.Helper()
	var gen uint16
	var pages map[uint16]int
	ids, stubs := c.stageView(iface, func(m policy.Mem) { gen, pages = policy.Generations(m) })
	for i, stub := range stubs {
		if !stub {
			c.t.Errorf("%s's stage program %d is not a policy engine stage", iface, ids[i])
		}
	}
	if len(pages) != 1 || pages[gen] == 0 {
		return 0 // mid-way: two generations, or none yet
	}
	return gen
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
// program IDs) and then enforces changes again. The stages are the
// policy engine's: the restarted felix binds its own generation's
// stages to the stubs in place and frees the previous generation.
//
// With bpfNoLoop (a kernel without bpf_loop) both felixes load the
// object without the policy engine and compile the stages.
func TestBPFRestart(t *testing.T) {
	for _, backend := range []string{"BPF", bpfNoLoop} {
		t.Run(backend, func(t *testing.T) { testBPFRestart(t, backend) })
	}
}

func testBPFRestart(t *testing.T, backend string) {
	c := newClusterNoFelix(t, backend, false)
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
	// featureDetectOverride BPFLoop=false compiles the stages instead.
	engine := !c.noLoop
	c.checkEngineObject(engine)
	if _, stubs := c.stageView(web.iface, nil); !engine && slices.Contains(stubs, true) {
		t.Errorf("without bpf_loop, web has policy engine stages: %v", stubs)
	}
	var firstGen uint16
	if engine {
		if firstGen = c.engineStages(web.iface); firstGen == 0 {
			t.Fatal("the policy engine's memory does not hold one generation's stages")
		}
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
	// The previous felix's generation goes once the new one's stages are
	// bound (in the apply that reported web programmed).
	if engine {
		c.waitFor(fmt.Sprintf("generation %d alone in the engine (the previous felix's %d freed)", firstGen+1, firstGen), func() bool {
			return c.engineStages(web.iface) == firstGen+1
		})
	}
	c.checkEngineObject(engine)
	// The new felix enforces a change.
	c.remove(rs)
	c.waitPolicies(rs, false)
	c.expect(allow("other", "web", "tcp", 8080))
}

// lineConn is an open connection to a nameServer.
type lineConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialLines(t *testing.T, run *nsexec.Runner, dst netip.AddrPort) *lineConn {
	t.Helper()
	c, err := dialIn(run, dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l := &lineConn{c: c, r: bufio.NewReader(c)}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := l.r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return l
}

// ask sends a line and reads its answer.
func (l *lineConn) ask(line string) error {
	_ = l.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(l.c, "%s\n", line); err != nil {
		return err
	}
	got, err := l.r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasSuffix(got, " "+line+"\n") {
		return fmt.Errorf("answer %q to %q", got, line)
	}
	return nil
}

// TestBPFServicesRestart kills felix (SIGKILL) while flows go through
// Services the programs load-balance — a TCP connection and a stream of
// datagrams from a pod to a cluster address, and from outside to a node
// port — and starts it again: no connection breaks and no datagram is
// lost, with no felix and across the new one's first writes, nor when a
// felix that cannot read the Services (no Kubernetes API) follows.
//
// With bpfNoLoop every felix loads the object without the policy engine.
func TestBPFServicesRestart(t *testing.T) {
	for _, backend := range []string{"BPF", bpfNoLoop} {
		t.Run(backend, func(t *testing.T) { testBPFServicesRestart(t, backend) })
	}
}

func testBPFServicesRestart(t *testing.T, backend string) {
	c := newClusterNoFelix(t, backend, false)
	cluster := netip.MustParseAddr("10.96.0.50")
	a := childArgs{
		Services: map[string]*calc.Service{"ns-a/web": {Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{cluster},
			Ports: []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80, NodePort: 30095}, {Name: "s", Proto: "udp", Port: 9101, NodePort: 30097},
				{Name: "n", Proto: "udp", Port: 30096, NodePort: 30096}}}},
		Slices: map[string]*calc.EndpointSlice{"ns-a/web-1": {Service: "web", Addresses: []netip.Addr{netip.MustParseAddr("10.65.0.1")},
			Ports:     []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "p"}, {Proto: "udp", Port: 9101, Name: "s"}, {Proto: "udp", Port: 30096, Name: "n"}},
			Endpoints: []calc.SliceEndpoint{readyOn("10.65.0.1", nodeName)}}},
	}
	first := c.startChildWith(t, "felix-1.log", a)
	setupPods(c)
	web, client := c.pods["web"], c.pods["client"]
	nameServer(t, web.run, "web")
	viaCluster, viaNodePort := netip.AddrPortFrom(cluster, 80), netip.AddrPortFrom(nodeAddr, 30095)
	waitAsk(t, client.run, "tcp", viaCluster)
	waitAsk(t, c.extRun, "tcp", viaNodePort)
	conns := map[string]*lineConn{"pod to cluster address": dialLines(t, client.run, viaCluster), "outside to node port": dialLines(t, c.extRun, viaNodePort)}
	streams := map[string]*udpStream{
		"pod to cluster address": startStream(t, client.run, web.run, cluster, 9101, time.Millisecond),
		"outside to node port":   startStream(t, c.extRun, web.run, nodeAddr, 30096, time.Millisecond),
	}
	exchange := func(when string) {
		t.Helper()
		for name, l := range conns {
			if err := l.ask(when); err != nil {
				t.Errorf("TCP %s, %s: %v", name, when, err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	exchange("before")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	exchange("no-felix")
	restarted := time.Now()
	second := c.startChildWith(t, "felix-2.log", a)
	c.waitProgrammedSince("ns-a", "web", restarted)
	time.Sleep(300 * time.Millisecond)
	exchange("after")
	// A felix that cannot read the Services (no Kubernetes API) leaves
	// the frontends as they are.
	if err := second.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = second.Process.Wait()
	restarted = time.Now()
	c.startChild(t, "felix-3.log")
	c.waitProgrammedSince("ns-a", "web", restarted)
	time.Sleep(300 * time.Millisecond)
	exchange("without-services")
	for name, s := range streams {
		sent, lost := s.finish()
		if len(lost) > 0 || sent < 100 {
			t.Errorf("UDP %s: %d of %d datagrams lost across the restart, the first: %v", name, len(lost), sent, lost[:min(len(lost), 10)])
		}
	}
	// New flows are balanced by the new felix's maps.
	waitAsk(t, client.run, "tcp", viaCluster)
	waitAsk(t, c.extRun, "tcp", viaNodePort)
	c.checkEngineObject(!c.noLoop)
}

// TestBPFLoopOverride: felix started with featureDetectOverride
// BPFLoop=false (from the datastore) loads the object without the policy
// engine and compiles the stages; the override dropped, the dataplane
// starts again with the engine's object and lays the stages out for it,
// policy holds throughout, and an allowed stream loses nothing.
func TestBPFLoopOverride(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	if c.noLoop {
		t.Skip("the environment forces BPFLoop=false")
	}
	if have, err := palbpf.HaveLoop(); err != nil || !have {
		t.Skipf("the kernel has no bpf_loop (%v)", err)
	}
	c.apply(c.felixConfig() + "  featureDetectOverride: BPFLoop=false\n")
	runFelix(t, c.ctx, c.cancel, c.felixConfigOf())
	setupPods(c)
	rs := c.apply(restartPolicy)
	c.waitPolicies(rs, true)
	probes := []probe{allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), deny("other", "web", "tcp", 8080)}
	c.expect(probes...)
	c.checkEngineObject(false)
	web := c.pods["web"]
	if _, stubs := c.stageView(web.iface, nil); len(stubs) == 0 || slices.Contains(stubs, true) {
		t.Errorf("BPFLoop=false: web's stages are not all compiled: engine stubs %v", stubs)
	}

	// A stream the policy allows flows across the switch: the maps
	// (conntrack) are the same for both objects, and nothing is lost.
	stream := startStream(t, c.pods["client"].run, web.run, web.ip, 9100, time.Millisecond)
	time.Sleep(100 * time.Millisecond)

	c.apply(c.felixConfig())
	c.waitFor("web's stages laid out for the policy engine", func() bool {
		_, stubs := c.stageView(web.iface, nil)
		return len(stubs) > 0 && !slices.Contains(stubs, false)
	})
	time.Sleep(100 * time.Millisecond)
	if sent, lost := stream.finish(); len(lost) > 0 || sent < 50 {
		t.Errorf("%d of %d datagrams lost across the switch of objects: %v", len(lost), sent, lost[:min(len(lost), 10)])
	}
	c.checkEngineObject(true)
	c.expect(probes...)
}
