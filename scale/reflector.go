package scale

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	scalenode "github.com/palisade-net/palisade/scale/node"
)

// BIRD 2, the reference reflector (Debian bird2).
const birdBinary = "/usr/sbin/bird"

// ReflectorMetrics are the values Reflectors reports.
var ReflectorMetrics = []Metric{
	{"ours_up_s", "sessions up, Palisade RR", "s"},
	{"ours_converge_s", "converged, Palisade RR", "s"},
	{"ours_rss_mb", "Palisade RR RSS", "MiB"},
	{"ours_peak_mb", "Palisade RR peak RSS", "MiB"},
	{"ours_cpu_s", "Palisade RR CPU while converging", "s"},
	{"bird_up_s", "sessions up, BIRD", "s"},
	{"bird_converge_s", "converged, BIRD", "s"},
	{"bird_rss_mb", "BIRD RSS", "MiB"},
	{"bird_peak_mb", "BIRD peak RSS", "MiB"},
	{"bird_cpu_s", "BIRD CPU while converging", "s"},
	{"converge_x", "converge time ours/BIRD", "×"},
	{"rss_x", "RSS ours/BIRD", "×"},
}

// MeshMetrics are the values Mesh reports.
var MeshMetrics = []Metric{
	{"mesh_up_s", "node's N-1 sessions up", "s"},
	{"mesh_converge_s", "every peer has the node's block", "s"},
	{"mesh_rss_mb", "node RSS (BGP part)", "MiB"},
	{"mesh_cpu_s", "node CPU while peers advertise", "s"},
}

// Addresses on the namespace's loopback (all of 127.0.0.0/8 is local
// there): the Palisade speaker, BIRD, and speaker i at clientAddr(i).
var (
	oursAddr = netip.MustParseAddr("127.0.1.1")
	birdAddr = netip.MustParseAddr("127.0.2.1")
)

func clientAddr(i int) netip.Addr {
	n := uint32(127)<<24 | uint32(1)<<16 + uint32(i+1)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

const clusterAS = 64512

// Reflectors measures, at each size n, one route reflector with n client
// sessions — first node/bgp's speaker as a Palisade node with
// routeReflectorClusterID, then BIRD 2 configured as Calico's docs
// configure it, with the same simulated clients in the same run. Each
// client holds one session and originates one /26 block; timed from every
// session Established and every client advertising at once, to every
// client having the n-1 other blocks. It must run in a network namespace
// of its own (see BGP).
func Reflectors(ctx context.Context, sizes []int, dir string) (Series, error) {
	s := Series{Name: "reflector", Metrics: ReflectorMetrics}
	for _, n := range sizes {
		p := Point{N: n}
		ours, err := oursReflector(ctx, n, dir)
		if err != nil {
			err = fmt.Errorf("Palisade reflector with %d clients: %w", n, err)
		} else if bird, berr := birdReflector(ctx, n, dir); berr != nil {
			err = fmt.Errorf("BIRD reflector with %d clients: %w", n, berr)
		} else {
			p.Values = merge(ours.values("ours"), bird.values("bird"))
			p.Values["converge_x"] = ours.converge.Seconds() / bird.converge.Seconds()
			p.Values["rss_x"] = ours.rss / bird.rss
		}
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("reflector: not measured at %d clients and above: %v", n, err))
			log.WithError(err).Error("Route reflector round failed")
			break
		}
		log.WithFields(log.Fields{"n": n, "values": p.Values}).Info("Route reflectors measured")
		s.Points = append(s.Points, p)
	}
	s.Notes = append(s.Notes, "reflector: one /26 per client, iBGP AS 64512, simulated clients in the harness's process; Palisade first, then BIRD 2, same clients, same run")
	return s, nil
}

// roundResult is one reflector's figures at one size: its resident set
// (VmRSS) once converged, and its peak (VmHWM) from start to then.
type roundResult struct {
	up, converge   time.Duration
	rss, peak, cpu float64
}

func (r roundResult) values(prefix string) map[string]float64 {
	return map[string]float64{prefix + "_up_s": r.up.Seconds(), prefix + "_converge_s": r.converge.Seconds(),
		prefix + "_rss_mb": r.rss, prefix + "_cpu_s": r.cpu, prefix + "_peak_mb": r.peak}
}

// listeningSpeakers makes the n simulated clients, listening.
func listeningSpeakers(n int) ([]*Speaker, error) {
	sp := clientSpeakers(n)
	for i, s := range sp {
		if err := s.Listen(); err != nil {
			for _, o := range sp[:i] {
				o.Close()
			}
			return nil, err
		}
	}
	return sp, nil
}

// clientSpeakers makes the n simulated clients.
func clientSpeakers(n int) []*Speaker {
	out := make([]*Speaker, n)
	for i := range out {
		out[i] = NewSpeaker(clientAddr(i), clusterAS, []netip.Prefix{NodeBlock(i)})
	}
	return out
}

// converge brings every speaker's session up (connect), then has them
// all advertise at once and waits until each has want routes. pid is the
// reflector's process, whose resident memory and CPU are read; start is
// when the sessions started to come up. A node process (node) is sent
// SIGUSR1 once its memory is read, which has it write its heap profile
// when profiled (node.ProfileEnv).
func converge(ctx context.Context, sp []*Speaker, connect func(context.Context, *Speaker) error, start time.Time, want int, pid int, node bool) (roundResult, error) {
	var r roundResult
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := parallelDo(64, len(sp), func(i int) error { return connect(cctx, sp[i]) }); err != nil {
		return r, err
	}
	r.up = time.Since(start)
	defer func() {
		for _, s := range sp {
			s.Close()
		}
	}()
	fulls := make([]<-chan struct{}, len(sp))
	for i, s := range sp {
		fulls[i] = s.Expect(want)
	}
	cpu0, err := ProcCPUSeconds(pid)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if err := parallelDo(16, len(sp), func(i int) error { return sp[i].Advertise() }); err != nil {
		return r, fmt.Errorf("advertising: %w", err)
	}
	for i, f := range fulls {
		select {
		case <-f:
		case <-cctx.Done():
			var short atomic.Int64
			for _, s := range sp {
				if s.Routes() < want {
					short.Add(1)
				}
			}
			return r, fmt.Errorf("client %d has %d of %d routes after 3 minutes (%d clients short)", i, sp[i].Routes(), want, short.Load())
		}
	}
	var last time.Time
	for _, s := range sp {
		if t := s.FullAt(); t.After(last) {
			last = t
		}
	}
	r.converge = last.Sub(t0)
	time.Sleep(200 * time.Millisecond) // what the last updates cost too
	cpu1, err := ProcCPUSeconds(pid)
	if err != nil {
		return r, err
	}
	r.cpu = cpu1 - cpu0
	if r.rss, err = ProcRSSMiB(pid); err != nil {
		return r, err
	}
	if r.peak, err = ProcPeakRSSMiB(pid); err != nil {
		return r, err
	}
	if node && os.Getenv(scalenode.ProfileEnv) != "" {
		_ = syscall.Kill(pid, syscall.SIGUSR1)
		time.Sleep(time.Second)
	}
	return r, nil
}

// startNode runs node/bgp for the node name against etcd, in a process of
// its own: the scale-node binary beside the harness's (its BGP part only,
// as the reflector's memory is measured), else the harness's binary in
// its node role.
func startNode(name string, e *Etcd, dir string) (*exec.Cmd, <-chan struct{}, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	bin, env := filepath.Join(filepath.Dir(self), "scale-node"), []string{}
	if _, err := os.Stat(bin); err != nil {
		bin, env = self, []string{roleEnv + "=" + roleNode}
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), env...), scalenode.NameEnv+"="+name, scalenode.EtcdEnv+"="+strings.Join(e.Endpoints, ","))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting node %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

// stopProcess ends a node process: SIGTERM (so it can write its
// profiles), SIGKILL after 5 s.
func stopProcess(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// bgpCluster writes the datastore of a BGP round: the pool, the
// BGPConfiguration (mesh on or off), n client Nodes and, when rr, the
// reflector's Node and the BGPPeer that peers every node with it.
func bgpCluster(ctx context.Context, w *etcdv3.Store, n int, rr bool) error {
	mesh := !rr
	asn := numorstring.ASNumber(clusterAS)
	// Each simulated node has an address of its own on the one loopback:
	// the node's speaker listens on its own address only, as the
	// simulated clients do on theirs.
	bind := v3.BindModeNodeIP
	rs := []v3.Resource{
		&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "default-ipv4-ippool"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 26}},
		&v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &mesh, ASNumber: &asn, BindMode: &bind}},
	}
	c := Cluster{}
	if rr {
		node := c.Node(0, oursAddr)
		node.Name = "rr"
		node.Labels["route-reflector"] = "true"
		node.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
		rs = append(rs, node, &v3.BGPPeer{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPPeer, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "peer-with-route-reflectors"},
			Spec:       v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"}})
	} else {
		rs = append(rs, c.Node(0, oursAddr))
	}
	for i := range n {
		node := c.Node(i, clientAddr(i))
		node.Name = fmt.Sprintf("client-%d", i)
		rs = append(rs, node)
	}
	if err := parallelDo(16, len(rs), func(k int) error { _, err := w.Create(ctx, rs[k]); return err }); err != nil {
		return fmt.Errorf("writing the BGP resources: %w", err)
	}
	return nil
}

func oursReflector(ctx context.Context, n int, dir string) (roundResult, error) {
	run, err := startRun(ctx, dir, fmt.Sprintf("rr-%d-", n), 1)
	if err != nil {
		return roundResult{}, err
	}
	defer run.stop()
	if err := bgpCluster(ctx, run.w, n, true); err != nil {
		return roundResult{}, err
	}
	d := run.dir
	// Palisade's reflector connects to its clients: they listen.
	sp, err := listeningSpeakers(n)
	if err != nil {
		return roundResult{}, err
	}
	defer func() {
		for _, s := range sp {
			s.Close()
		}
	}()
	start := time.Now()
	cmd, done, err := startNode("rr", run.etcd, d)
	if err != nil {
		return roundResult{}, err
	}
	defer stopProcess(cmd, done)
	r, err := converge(ctx, sp, func(ctx context.Context, s *Speaker) error { return s.Accept(ctx) }, start, n-1, cmd.Process.Pid, true)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(d, "rr.log"))
		return r, fmt.Errorf("%w; reflector log ends: %s", err, tail(b, 1500))
	}
	return r, nil
}

func birdReflector(ctx context.Context, n int, dir string) (roundResult, error) {
	if _, err := os.Stat(birdBinary); err != nil {
		return roundResult{}, fmt.Errorf("%s not installed (Debian bird2): %w", birdBinary, err)
	}
	d, err := os.MkdirTemp(dir, fmt.Sprintf("bird-%d-", n))
	if err != nil {
		return roundResult{}, err
	}
	defer os.RemoveAll(d)
	var conf strings.Builder
	fmt.Fprintf(&conf, "router id %s;\nprotocol device { }\nprotocol direct { ipv4; interface \"lo\"; }\n", birdAddr)
	fmt.Fprintf(&conf, "template bgp rrclient { local %s as %d; rr client; rr cluster id 224.0.0.1; ipv4 { import all; export all; }; }\n", birdAddr, clusterAS)
	for i := range n {
		fmt.Fprintf(&conf, "protocol bgp c%d from rrclient { neighbor %s as %d; }\n", i, clientAddr(i), clusterAS)
	}
	cf := filepath.Join(d, "bird.conf")
	if err := os.WriteFile(cf, []byte(conf.String()), 0o644); err != nil {
		return roundResult{}, err
	}
	logf, err := os.Create(filepath.Join(d, "bird.log"))
	if err != nil {
		return roundResult{}, err
	}
	defer logf.Close()
	cmd := exec.Command(birdBinary, "-f", "-c", cf, "-s", filepath.Join(d, "bird.ctl"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return roundResult{}, fmt.Errorf("starting BIRD: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer stopProcess(cmd, done)
	ctl := filepath.Join(d, "bird.ctl")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ctl); err == nil {
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			return roundResult{}, fmt.Errorf("BIRD exited: %s", tail(b, 1500))
		default:
		}
		if time.Now().After(deadline) {
			return roundResult{}, fmt.Errorf("BIRD made no control socket in 30s")
		}
	}
	remote := netip.AddrPortFrom(birdAddr, 179)
	r, err := converge(ctx, clientSpeakers(n), func(ctx context.Context, s *Speaker) error { return s.Connect(ctx, remote) }, time.Now(), n-1, cmd.Process.Pid, false)
	if err != nil {
		b, _ := os.ReadFile(logf.Name())
		return r, fmt.Errorf("%w; BIRD log ends: %s", err, tail(b, 1500))
	}
	return r, nil
}

// Mesh measures, at each size n, one node/bgp node in a full mesh of n
// nodes: the n-1 others are simulated speakers that each originate a
// block; the node originates its own (one IPAM block). Timed from the
// first dial to all sessions up, then from all advertising to every peer
// having the node's block, with the node's memory and CPU.
func Mesh(ctx context.Context, sizes []int, dir string) (Series, error) {
	s := Series{Name: "mesh", Metrics: MeshMetrics}
	for _, n := range sizes {
		r, err := meshOnce(ctx, n, dir)
		if err != nil {
			return s, fmt.Errorf("full mesh of %d nodes: %w", n, err)
		}
		s.Points = append(s.Points, Point{N: n, Values: map[string]float64{"mesh_up_s": r.up.Seconds(),
			"mesh_converge_s": r.converge.Seconds(), "mesh_rss_mb": r.rss, "mesh_cpu_s": r.cpu}})
	}
	s.Notes = append(s.Notes, "mesh: one node/bgp node with n-1 simulated mesh peers at the largest size; a real mesh has n such nodes")
	return s, nil
}

func meshOnce(ctx context.Context, n int, dir string) (roundResult, error) {
	run, err := startRun(ctx, dir, fmt.Sprintf("mesh-%d-", n), 1)
	if err != nil {
		return roundResult{}, err
	}
	defer run.stop()
	w, e, d := run.w, run.etcd, run.dir
	if err := bgpCluster(ctx, w, n-1, false); err != nil {
		return roundResult{}, err
	}
	// The node's own block, as its first pod's CNI ADD claims it.
	if _, _, err := ipam.New(w, w.KV()).AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, Hostname: NodeName(0), HandleID: "k8s-pod-network.scale"}); err != nil {
		return roundResult{}, fmt.Errorf("claiming the node's block: %w", err)
	}
	cmd, done, err := startNode(NodeName(0), e, d)
	if err != nil {
		return roundResult{}, err
	}
	defer stopProcess(cmd, done)
	remote := netip.AddrPortFrom(oursAddr, 179)
	r, err := converge(ctx, clientSpeakers(n-1), func(ctx context.Context, s *Speaker) error { return s.Connect(ctx, remote) }, time.Now(), 1, cmd.Process.Pid, true)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(d, NodeName(0)+".log"))
		return r, fmt.Errorf("%w; node log ends: %s", err, tail(b, 1500))
	}
	return r, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func merge(a, b map[string]float64) map[string]float64 {
	for k, v := range b {
		a[k] = v
	}
	return a
}
