package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/names"
)

const nodeName = "bench-node"

// bed is a node namespace with many workload endpoints (real cali veths,
// their other ends left in the node namespace) and a few real pods, an
// embedded etcd holding them and many policies, and felix programming it.
type bed struct {
	b       *testing.B
	ctx     context.Context
	prefix  string
	store   datastore.Interface
	node    nstest.NS
	nodeRun *nsexec.Runner
	nodeH   *netlink.Handle
	status  string
	stop    func()
	// exited is why a felix of the bed ended before it was stopped.
	exited atomic.Pointer[error]
}

// dataplanes are the sub-benchmarks of each pipeline benchmark: felix's
// iptables dataplane and its eBPF one (bpfEnabled), in one table. A
// benchmark may add "bpf-tc": the eBPF dataplane with bpfAttachType TC,
// "bpf-rcu-expedited": TCX on a kernel whose synchronize_rcu is
// expedited (/sys/kernel/rcu_expedited at 1, a node's tuning, which
// felix leaves alone; see expediteRCU), and "bpf-no-expedite": TCX with
// bpfExpediteAttach false, felix leaving the kernel's grace periods
// plain. "bpf" is felix's default: TCX, grace periods expedited by felix
// only while it makes new links (bpfExpediteAttach); it and
// bpf-no-expedite need the switch at 0 (plainRCU).
var dataplanes = []string{"iptables", "bpf"}

func newBed(b *testing.B, dataplane string) *bed {
	nstest.RequireRoot(b)
	log.SetLevel(log.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	e := &bed{b: b, ctx: ctx, prefix: nstest.Prefix(), status: b.TempDir(), stop: func() {}}
	e.store = etcdtest.NewStore(b, etcdtest.Start(b))
	e.node = nstest.New(b, e.prefix, "node")
	var err error
	if e.nodeRun, err = nsexec.New(e.node.Path()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.nodeRun.Close() })
	// The eBPF dataplane's pins outlive the namespace.
	b.Cleanup(func() {
		if err := palbpf.RemoveAll("", e.nodeRun); err != nil {
			b.Error(err)
		}
	})
	e.nodeH, _ = nstest.Handle(b, e.node)
	if err := nstest.Sysctl(e.nodeRun, "net/ipv4/ip_forward", "1"); err != nil {
		b.Fatal(err)
	}
	attachType := "" // bpf: TCX, Calico's default
	switch dataplane {
	case "bpf-tc":
		attachType = ", bpfAttachType: TC"
	case "bpf-rcu-expedited":
		expediteRCU(b)
	case "bpf-no-expedite":
		attachType = ", bpfExpediteAttach: false"
		plainRCU(b)
	case "bpf":
		plainRCU(b)
	}
	e.apply(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {ipv6Support: false, bpfEnabled: ` + strconv.FormatBool(strings.HasPrefix(dataplane, "bpf")) + attachType + `}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.80.0.0/16}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.bench}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`)
	return e
}

func (e *bed) apply(y string) {
	e.b.Helper()
	rs, err := v3.Decode([]byte(y))
	if err != nil {
		e.b.Fatal(err)
	}
	for _, r := range rs {
		if _, err := e.store.Apply(e.ctx, r); err != nil {
			e.b.Fatal(err)
		}
	}
}

func (e *bed) delete(kind, ns, name string) {
	e.b.Helper()
	if _, err := e.store.Delete(e.ctx, datastore.Key{Kind: kind, Namespace: ns, Name: name}, ""); err != nil {
		e.b.Fatal(err)
	}
}

// startFelix runs felix on the node namespace until the benchmark ends.
func (e *bed) startFelix() { e.stop = e.runFelix(nodeName, e.node.Path(), e.status) }

// runFelix runs felix for a node until the benchmark ends or the
// returned stop is called.
func (e *bed) runFelix(node, netns, statusDir string) (stop func()) {
	return e.runFelixWith(node, netns, statusDir, nil)
}

// runFelixWith is runFelix with an EndpointSlices source (Services).
func (e *bed) runFelixWith(node, netns, statusDir string, slices felix.UpdateSource) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		err := felix.Run(ctx, felix.Config{NodeName: node, Store: e.store, NetNS: netns, StatusDir: statusDir, EndpointSlices: slices})
		if ctx.Err() == nil {
			err = fmt.Errorf("felix of %s ended by itself: %v", node, err)
			e.exited.Store(&err)
		}
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.b.Error(err)
			}
		})
	}
	e.b.Cleanup(stop)
	return stop
}

// why says what may have kept a pod from being served: a felix that
// ended, the endpoint's status, the node's route to the pod.
func (e *bed) why(p *pod) string {
	var out []string
	if err := e.exited.Load(); err != nil {
		out = append(out, (*err).Error())
	}
	if p.wep != "" {
		_, err := statFile(e.status + "/" + dataplane.StatusFileName("bench", p.wep))
		out = append(out, fmt.Sprintf("endpoint reported programmed: %v", err == nil))
	}
	routes, err := e.nodeH.RouteGet(net.IP(p.ip.AsSlice()))
	out = append(out, fmt.Sprintf("node's route to %s: %v %v", p.ip, routes, err))
	return strings.Join(out, "; ")
}

func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 80, byte(i >> 8), byte(i)}) }

// wep writes the WorkloadEndpoint of a pod of the bed's node.
func (e *bed) wep(pod, iface string, ip netip.Addr, labels map[string]string) string {
	e.b.Helper()
	return e.wepOn(nodeName, pod, iface, ip, labels)
}

// wepOn writes the WorkloadEndpoint of a pod of node.
func (e *bed) wepOn(node, pod, iface string, ip netip.Addr, labels map[string]string) string {
	e.b.Helper()
	w := wepOf(node, pod, iface, ip, labels)
	if _, err := e.store.Apply(e.ctx, w); err != nil {
		e.b.Fatal(err)
	}
	return w.Name
}

// newWep creates a new pod's WorkloadEndpoint as the CNI plugin does (one
// create, no read first).
func (e *bed) newWep(pod, iface string, ip netip.Addr, labels map[string]string) string {
	e.b.Helper()
	w := wepOf(nodeName, pod, iface, ip, labels)
	if _, err := e.store.Create(e.ctx, w); err != nil {
		e.b.Fatal(err)
	}
	return w.Name
}

func wepOf(node, pod, iface string, ip netip.Addr, labels map[string]string) *v3.WorkloadEndpoint {
	return &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(node, "k8s", pod, "eth0"), Namespace: "bench", Labels: labels},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: node, Pod: pod, Endpoint: "eth0",
			InterfaceName: iface, IPNetworks: []string{ip.String() + "/32"}, Profiles: []string{"kns.bench"}},
	}
}

// fillers adds n endpoints with real cali veths whose other end stays in
// the node namespace, spread over groups g0..g<groups-1>.
func (e *bed) fillers(n, groups int) {
	for i := range n {
		iface := fmt.Sprintf("calib%010d", i)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: iface}, PeerName: fmt.Sprintf("pb%010d", i)}
		if err := e.nodeH.LinkAdd(veth); err != nil {
			e.b.Fatalf("veth %s: %v", iface, err)
		}
		_ = e.nodeH.LinkSetUp(veth)
		e.wep(fmt.Sprintf("filler-%d", i), iface, addr(1000+i), map[string]string{"group": fmt.Sprintf("g%d", i%groups)})
	}
}

// policies adds n ingress policies: policy i selects group g<i%groups> and
// allows one TCP port from the next group.
func (e *bed) policies(n, groups int) {
	for i := range n {
		e.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: p%d}
spec:
  order: %d
  selector: group == 'g%d'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, source: {selector: group == 'g%d'}, destination: {ports: [%d]}}]
`, i, 100+i, i%groups, (i+1)%groups, 10000+i))
	}
}

// pod is a real workload with its own namespace.
type pod struct {
	name  string
	ip    netip.Addr
	iface string
	ns    nstest.NS
	run   *nsexec.Runner
	wep   string
}

// plumb makes a pod's namespace and veth (what the CNI plugin does before
// it writes the WorkloadEndpoint) on the bed's node.
func (e *bed) plumb(name string, ip netip.Addr) *pod {
	e.b.Helper()
	return e.plumbOn(e.nodeH, name, ip)
}

// plumbOn makes a pod's namespace and veth on the node of nodeH.
func (e *bed) plumbOn(nodeH *netlink.Handle, name string, ip netip.Addr) *pod {
	e.b.Helper()
	p := e.podNS(name, ip)
	e.link(nodeH, p)
	return p
}

// podNS makes a pod's namespace, without its veth yet.
func (e *bed) podNS(name string, ip netip.Addr) *pod {
	e.b.Helper()
	p := &pod{name: name, ip: ip, iface: names.VethNameForWorkload("bench", name)}
	p.ns = nstest.New(e.b, e.prefix, name)
	var err error
	if p.run, err = nsexec.New(p.ns.Path()); err != nil {
		e.b.Fatal(err)
	}
	e.b.Cleanup(func() { p.run.Close() })
	return p
}

// link makes a pod's veth to the node of nodeH and its addresses and
// routes inside the pod, as the CNI plugin does.
func (e *bed) link(nodeH *netlink.Handle, p *pod) {
	e.b.Helper()
	podH, podNS := nstest.Handle(e.b, p.ns)
	if err := nstest.Workload(nodeH, podH, podNS, p.iface, p.ip); err != nil {
		e.b.Fatal(err)
	}
}

// unplumb deletes a pod's veth (both ends go), as the CNI plugin's DEL
// does; its namespace is left for the test's cleanup.
func (e *bed) unplumb(p *pod) {
	e.b.Helper()
	link, err := e.nodeH.LinkByName(p.iface)
	if err == nil {
		err = e.nodeH.LinkDel(link)
	}
	if err != nil {
		e.b.Fatalf("deleting the veth of %s: %v", p.name, err)
	}
}

// waitStatus waits for felix to report the endpoint programmed.
func (e *bed) waitStatus(wep string, timeout time.Duration) {
	e.b.Helper()
	e.waitStatusIn(e.status, wep, timeout)
}

// waitStatusIn waits for the endpoint's status file in a felix's status
// directory.
func (e *bed) waitStatusIn(dir, wep string, timeout time.Duration) {
	e.b.Helper()
	path := dir + "/" + dataplane.StatusFileName("bench", wep)
	deadline := time.Now().Add(timeout)
	for {
		if _, err := statFile(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			why := ""
			if err := e.exited.Load(); err != nil {
				why = ": " + (*err).Error()
			}
			e.b.Fatalf("endpoint %s not programmed within %s%s", wep, timeout, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatusGone waits until felix removed an endpoint's status file:
// the endpoint's rules are gone.
func (e *bed) waitStatusGone(wep string, timeout time.Duration) {
	e.b.Helper()
	path := e.status + "/" + dataplane.StatusFileName("bench", wep)
	deadline := time.Now().Add(timeout)
	for {
		if _, err := statFile(path); err != nil {
			return
		}
		if time.Now().After(deadline) {
			e.b.Fatalf("endpoint %s still programmed %s after its removal", wep, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connect tries one TCP connection from run's namespace with a short
// timeout: a dropped SYN shows as a timeout.
func connect(run *nsexec.Runner, dst netip.AddrPort, timeout time.Duration) bool {
	var c net.Conn
	err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), timeout)
		return err
	})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// prober starts a prober process (nstest.Prober) in run's namespace for
// dst, ready to go; it ends with the benchmark at the latest.
func prober(b *testing.B, run *nsexec.Runner, dst netip.AddrPort, limit time.Duration) *nstest.Prober {
	b.Helper()
	p, err := nstest.StartProber(run, dst, limit)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// opening times how long after do starts a TCP path opens: the prober
// (made ready beforehand, a process of the client's own) starts a SYN
// every 250 µs from fresh sockets just before do runs, and the time the
// first answer arrived is taken (nstest.Clock). It reports false when
// the path did not open within the prober's limit.
func opening(b *testing.B, p *nstest.Prober, do func()) (time.Duration, bool) {
	b.Helper()
	defer p.Close()
	start := nstest.Clock()
	if err := p.Go(); err != nil {
		b.Fatal(err)
	}
	do()
	at, ok, err := p.Opened()
	if err != nil {
		b.Fatal(err)
	}
	return at - start, ok
}

// opens waits until a TCP path is open.
func opens(b *testing.B, run *nsexec.Runner, dst netip.AddrPort, limit time.Duration) bool {
	_, ok := opening(b, prober(b, run, dst, limit), func() {})
	return ok
}

// closing probes until a TCP path drops a connection and returns when
// that was seen, counted from start. A connection that fails proves
// nothing unless it waited long enough for an answer that did not come
// (a busy machine can delay a SYN-ACK by milliseconds), so each probe
// waits 50 ms, and the time its SYN was sent is taken: the path was
// closed then.
func closing(run *nsexec.Runner, dst netip.AddrPort, start time.Time, limit time.Duration) (time.Duration, bool) {
	for time.Since(start) < limit {
		sent := time.Since(start)
		if !connect(run, dst, 50*time.Millisecond) {
			return sent, true
		}
	}
	return 0, false
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// The link between the bed's node and a peer node: a veth, nodeAddr on
// the node's side (peerLink), peerAddr on the peer's (nodeLink).
var (
	nodeAddr = netip.MustParseAddr("198.18.0.1")
	peerAddr = netip.MustParseAddr("198.18.0.2")
)

const (
	peerLink = "eth-peer"
	nodeLink = "eth-node"
)

// peerNode is a second node for the benchmarks that cross nodes: a
// namespace of its own linked to the bed's node, with its own felix
// (startFelix) on the same datastore.
type peerNode struct {
	name   string
	ns     nstest.NS
	run    *nsexec.Runner
	h      *netlink.Handle
	status string
}

// addPeer makes a peer node, linked to the bed's node.
func (e *bed) addPeer(name string) *peerNode {
	e.b.Helper()
	p := &peerNode{name: name, status: e.b.TempDir()}
	p.ns = nstest.New(e.b, e.prefix, name)
	var err error
	if p.run, err = nsexec.New(p.ns.Path()); err != nil {
		e.b.Fatal(err)
	}
	e.b.Cleanup(func() { p.run.Close() })
	e.b.Cleanup(func() {
		if err := palbpf.RemoveAll("", p.run); err != nil {
			e.b.Error(err)
		}
	})
	p.h, _ = nstest.Handle(e.b, p.ns)
	if err := nstest.Sysctl(p.run, "net/ipv4/ip_forward", "1"); err != nil {
		e.b.Fatal(err)
	}
	e.node.MustRun(e.b, "ip", "link", "add", peerLink, "type", "veth", "peer", "name", nodeLink, "netns", p.ns.Name)
	e.node.MustRun(e.b, "ip", "addr", "add", nodeAddr.String()+"/24", "dev", peerLink)
	e.node.MustRun(e.b, "ip", "link", "set", peerLink, "up")
	p.ns.MustRun(e.b, "ip", "addr", "add", peerAddr.String()+"/24", "dev", nodeLink)
	p.ns.MustRun(e.b, "ip", "link", "set", nodeLink, "up")
	return p
}

// startFelix runs the peer's felix until the benchmark ends.
func (p *peerNode) startFelix(e *bed) { e.runFelix(p.name, p.ns.Path(), p.status) }

// rcuExpedited is the kernel's switch that makes every synchronize_rcu
// an expedited grace period: the TCX attachment's wait under the rtnl
// lock falls from milliseconds to tens of microseconds.
const rcuExpedited = "/sys/kernel/rcu_expedited"

// expediteRCU turns the kernel's expedited grace periods on for the
// benchmark and gives the switch back its value when it ends. It is the
// node-wide tuning docs/bpf.md describes, not something felix does.
func expediteRCU(b *testing.B) {
	was, err := os.ReadFile(rcuExpedited)
	if err != nil {
		b.Skipf("no %s: %v", rcuExpedited, err)
	}
	if err := os.WriteFile(rcuExpedited, []byte("1"), 0); err != nil {
		b.Skipf("cannot expedite RCU: %v", err)
	}
	b.Cleanup(func() {
		if err := os.WriteFile(rcuExpedited, was, 0); err != nil {
			b.Errorf("%s not given back %q: %v", rcuExpedited, was, err)
		}
	})
}

// plainRCU checks the kernel's grace periods are not expedited when the
// benchmark starts (felix's bpfExpediteAttach would leave a switch at 1
// alone, and the run would measure the node's tuning instead), and that
// felix has put the switch back to 0 when it ends.
func plainRCU(b *testing.B) {
	read := func() string {
		v, err := os.ReadFile(rcuExpedited)
		if err != nil {
			b.Skipf("no %s: %v", rcuExpedited, err)
		}
		return strings.TrimSpace(string(v))
	}
	if v := read(); v != "0" {
		b.Skipf("%s is %s (expedited by someone else): this run would not measure felix's own setting", rcuExpedited, v)
	}
	b.Cleanup(func() {
		if v := read(); v != "0" {
			b.Errorf("%s is %s after the run: felix did not put it back", rcuExpedited, v)
		}
	})
}
