package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/names"
	"github.com/palisade-net/palisade/libcalico/testsupport/ipamreport"
)

// The lab's churn: pods come and go over three nodes of a lab with
// Kubernetes, several at a time, as kubelet makes them: the Pod object
// (its scheduler's nodeName set), a sandbox (a network namespace and the
// calico plugin's ADD), its status; at the end the plugin's DEL, the
// namespace, the Pod. A share of the plugin processes is SIGKILLed at a
// random moment of its run, and now and then a node's calico-node (the
// supervisor starts it again). kubelet's answer to a failed ADD is
// imitated: the sandbox's DEL, repeated until it succeeds, then a new
// sandbox and ADD.

// churnNS is the Kubernetes namespace of the churn's pods.
const churnNS = "churn"

// labChurnConfig sizes one churn.
type labChurnConfig struct {
	// workers run at once, each with slots pod names of its own.
	workers, slots int
	// ops is how many plugin runs (ADD or DEL) to make, about.
	ops int
	// killRate is the share of plugin processes SIGKILLed.
	killRate float64
	// agentKills is how many times a calico-node is SIGKILLed, spread
	// over the run.
	agentKills int
	seed       uint64
}

// labChurnStats is what a churn did.
type labChurnStats struct {
	mu                          sync.Mutex
	adds, addsOK, dels, retries int
	kills, agentKills, pods     int
	// picked is how many runs were given a moment to be killed at.
	picked     int
	unexpected []string
	// addTime, delTime and kubeTime are the time spent in ADDs, DELs and
	// kubelet's API calls.
	addTime, delTime, kubeTime time.Duration
	elapsed                    time.Duration
	runs                       atomic.Int64
}

func (s *labChurnStats) add(f func(s *labChurnStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *labChurnStats) String() string {
	avg := func(d time.Duration, n int) time.Duration {
		return (d / time.Duration(max(n, 1))).Round(time.Millisecond)
	}
	return fmt.Sprintf("%d plugin runs (%d ADD, %d of them networked a pod; %d DEL, %d of them retries), %d plugins SIGKILLed (%.0f%%), %d calico-node SIGKILLed, %d pods, in %s: %.1f allocations/s; on average ADD %s, DEL %s, a pod's API calls %s",
		s.runs.Load(), s.adds, s.addsOK, s.dels, s.retries, s.kills, 100*float64(s.kills)/float64(max(1, s.runs.Load())), s.agentKills, s.pods, s.elapsed.Round(time.Millisecond), s.rate(),
		avg(s.addTime, s.adds), avg(s.delTime, s.dels), avg(s.kubeTime, s.pods))
}

// rate is pods networked (successful ADDs) a second.
func (s *labChurnStats) rate() float64 { return float64(s.addsOK) / s.elapsed.Seconds() }

// killExec runs a CNI plugin as libcni's default does, and SIGKILLs it
// after kill when that is set.
type killExec struct {
	version.PluginDecoder
	kill   time.Duration
	stderr *os.File
	killed bool
}

func (e *killExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *killExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env, cmd.Stdin, cmd.Stderr = environ, bytes.NewReader(stdin), e.stderr
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", pluginPath, err)
	}
	if e.kill > 0 {
		// os.Process.Signal is safe after the process is reaped.
		t := time.AfterFunc(e.kill, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		defer t.Stop()
	}
	err := cmd.Wait()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			e.killed = true
			return nil, errors.New("plugin SIGKILLed")
		}
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(pluginPath), err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), err
}

// churnCNI runs ADD (or DEL) of a sandbox on its node as l.cni does, the
// plugin killed after kill when that is set.
func (l *Lab) churnCNI(ctx context.Context, p Pod, add bool, kill time.Duration) (netip.Addr, bool, error) {
	n, ok := l.Node(p.Node)
	if !ok {
		return netip.Addr{}, false, fmt.Errorf("no node %s", p.Node)
	}
	list, err := libcni.ConfListFromFile(l.cniConfPath(p.Node))
	if err != nil {
		return netip.Addr{}, false, err
	}
	f, err := os.OpenFile(l.nodeDir(p.Node, "cni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return netip.Addr{}, false, err
	}
	defer f.Close()
	ex := &killExec{PluginDecoder: version.PluginDecoder{}, kill: kill, stderr: f}
	c := libcni.NewCNIConfigWithCacheDir([]string{l.st.Options.BinDir}, l.path("cni-cache"), ex)
	var ip netip.Addr
	err = inNS(n.NS, func() error {
		if !add {
			return c.DelNetworkList(ctx, list, p.runtimeConf())
		}
		r, err := c.AddNetworkList(ctx, list, p.runtimeConf())
		if err != nil {
			return err
		}
		res, err := types100.NewResultFromResult(r)
		if err != nil {
			return err
		}
		for _, a := range res.IPs {
			if v, ok := netip.AddrFromSlice(a.Address.IP); ok && v.Unmap().Is4() {
				ip = v.Unmap()
			}
		}
		if !ip.IsValid() {
			return errors.New("the CNI result has no IPv4 address")
		}
		return nil
	})
	return ip, ex.killed, err
}

// churner runs one churn on a lab.
type churner struct {
	t   testing.TB
	l   *Lab
	cfg labChurnConfig
	st  *labChurnStats
	mu  sync.Mutex
	// live are the pods networked now, by name.
	live map[string]Pod
	// ns are the slots' network namespaces, by pod name: each sandbox of
	// a slot's pods in turn (kubelet makes a new one each time; reusing
	// it checks that DEL leaves it empty, and spares the test the cost).
	ns map[string]string
}

// slotNS is the namespace of the pod name's sandboxes, made at its first.
func (c *churner) slotNS(ctx context.Context, name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns, ok := c.ns[name]; ok {
		return ns, nil
	}
	ns, err := c.l.newNS(ctx, "pod-"+churnNS+"."+name)
	if err == nil {
		c.ns[name] = ns
	}
	return ns, err
}

// nsLinks are the interfaces in a namespace.
func nsLinks(t testing.TB, ns string) []string {
	var out []string
	if err := inNS(ns, func() error {
		links, err := netlink.LinkList()
		for _, k := range links {
			out = append(out, k.Attrs().Name)
		}
		return err
	}); err != nil {
		t.Errorf("listing the interfaces of %s: %v", ns, err)
	}
	slices.Sort(out)
	return out
}

// killAfter is when to kill the next plugin run: never, or at a random
// moment of a typical run of its command, uniform over 1.25 times the mean
// run so far (a run takes 0.1–1.5 s here, as busy as the machine is), so
// kills land in every step: start-up, IPAM, the veth, the endpoint,
// felix's wait.
//
// A run may end before its moment; the share of runs picked grows so
// that the share of runs killed is killRate.
func (c *churner) killAfter(rng *rand.Rand, add bool) time.Duration {
	c.st.mu.Lock()
	pick := c.cfg.killRate
	if c.st.kills >= 10 {
		pick = min(1, c.cfg.killRate*float64(c.st.picked)/float64(c.st.kills))
	}
	c.st.mu.Unlock()
	if rng.Float64() >= pick {
		return 0
	}
	c.st.mu.Lock()
	c.st.picked++
	total, n := c.st.delTime, c.st.dels
	if add {
		total, n = c.st.addTime, c.st.adds
	}
	c.st.mu.Unlock()
	mean := 300 * time.Millisecond
	if n >= 10 {
		mean = total / time.Duration(n)
	}
	return time.Duration(1 + rng.Int64N(int64(mean)*5/4))
}

// del runs the sandbox's DEL until it succeeds, as kubelet does (each run
// may be killed too), then deletes its namespace.
func (c *churner) del(ctx context.Context, rng *rand.Rand, sb Pod) error {
	for attempt := 1; ; attempt++ {
		began := time.Now()
		_, killed, err := c.l.churnCNI(ctx, sb, false, c.killAfter(rng, false))
		took := time.Since(began)
		c.st.runs.Add(1)
		c.st.add(func(s *labChurnStats) {
			s.dels++
			s.delTime += took
			if attempt > 1 {
				s.retries++
			}
			if killed {
				s.kills++
			} else if err != nil {
				s.unexpected = append(s.unexpected, fmt.Sprintf("DEL %s (%s on %s): %v", sb.Key(), sb.ContainerID[:12], sb.Node, err))
			}
		})
		if err == nil {
			// The namespace is the slot's next sandbox's: DEL must have
			// left nothing in it.
			if links := nsLinks(c.t, sb.NS); !slices.Equal(links, []string{"lo"}) {
				return fmt.Errorf("after the DEL of %s (%s) on %s its namespace still holds %v", sb.Key(), sb.ContainerID[:12], sb.Node, links)
			}
			return nil
		}
		if attempt == 50 {
			return fmt.Errorf("DEL of %s (%s) on %s failed 50 times: %w", sb.Key(), sb.ContainerID[:12], sb.Node, err)
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
}

// start makes a pod on node as kubelet does: the Pod object, then
// sandboxes until one's ADD succeeds (each failed one DELeted first), then
// its status.
func (c *churner) start(ctx context.Context, rng *rand.Rand, name, node string) (Pod, error) {
	n, _ := c.l.Node(node)
	p := Pod{Node: node, Namespace: churnNS, Name: name}
	began := time.Now()
	if err := c.l.createKubePod(ctx, p, n, PodOptions{}); err != nil {
		return Pod{}, err
	}
	took := time.Since(began)
	c.st.add(func(s *labChurnStats) { s.pods++; s.kubeTime += took })
	for gen := 0; ; gen++ {
		sb := p
		sb.ContainerID = fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
		var err error
		if sb.NS, err = c.slotNS(ctx, name); err != nil {
			return Pod{}, err
		}
		began := time.Now()
		ip, killed, err := c.l.churnCNI(ctx, sb, true, c.killAfter(rng, true))
		took := time.Since(began)
		c.st.runs.Add(1)
		c.st.add(func(s *labChurnStats) {
			s.adds++
			s.addTime += took
			switch {
			case killed:
				s.kills++
			case err != nil:
				s.unexpected = append(s.unexpected, fmt.Sprintf("ADD %s (%s on %s): %v", sb.Key(), sb.ContainerID[:12], sb.Node, err))
			default:
				s.addsOK++
			}
		})
		if err == nil {
			sb.IP = ip
			began := time.Now()
			if err := c.l.writePodStatus(ctx, sb, n); err != nil {
				return Pod{}, err
			}
			took := time.Since(began)
			c.st.add(func(s *labChurnStats) { s.kubeTime += took })
			return sb, nil
		}
		if err := c.del(ctx, rng, sb); err != nil {
			return Pod{}, err
		}
		if gen == 20 {
			return Pod{}, fmt.Errorf("pod %s on %s: 20 sandboxes failed", p.Key(), node)
		}
	}
}

// stop deletes a pod as kubelet does: DEL until it succeeds, its
// namespace, then the Pod object.
func (c *churner) stop(ctx context.Context, rng *rand.Rand, p Pod) error {
	if err := c.del(ctx, rng, p); err != nil {
		return err
	}
	began := time.Now()
	err := c.l.deleteKubePod(ctx, p)
	took := time.Since(began)
	c.st.add(func(s *labChurnStats) { s.kubeTime += took })
	return err
}

// run churns until cfg.ops plugin runs are made; the pods live then stay.
func (c *churner) run(ctx context.Context) {
	t, cfg := c.t, c.cfg
	nodes := c.l.Nodes()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.workers+1)
	for w := range cfg.workers {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(w)))
		wg.Go(func() {
			for c.st.runs.Load() < int64(cfg.ops) {
				name := fmt.Sprintf("p%d-%d", w, rng.IntN(cfg.slots))
				c.mu.Lock()
				p, live := c.live[name]
				c.mu.Unlock()
				if live {
					if err := c.stop(ctx, rng, p); err != nil {
						errs <- err
						return
					}
					c.mu.Lock()
					delete(c.live, name)
					c.mu.Unlock()
					continue
				}
				p, err := c.start(ctx, rng, name, nodes[rng.IntN(len(nodes))].Name)
				if err != nil {
					errs <- err
					return
				}
				c.mu.Lock()
				c.live[name] = p
				c.mu.Unlock()
			}
		})
	}
	// Now and then a calico-node SIGKILLed, spread over the run.
	rng := rand.New(rand.NewPCG(cfg.seed, 1<<32))
	workersDone := make(chan struct{})
	var killer sync.WaitGroup
	killer.Go(func() {
		for k := 1; k <= cfg.agentKills; k++ {
			for c.st.runs.Load() < int64(k*cfg.ops/(cfg.agentKills+1)) {
				select {
				case <-workersDone:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			node := nodes[rng.IntN(len(nodes))].Name
			took, err := c.l.RestartAgent(ctx, node, syscall.SIGKILL, 90*time.Second)
			if err != nil {
				errs <- err
				return
			}
			c.st.add(func(s *labChurnStats) { s.agentKills++ })
			t.Logf("calico-node on %s SIGKILLed after %d plugin runs; back with its BGP sessions in %s", node, c.st.runs.Load(), took.Round(time.Millisecond))
		}
	})
	wg.Wait()
	close(workersDone)
	killer.Wait()
	c.st.elapsed = time.Since(began)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(c.st.unexpected) > 0 {
		t.Errorf("%d plugin runs failed without being killed:\n%s", len(c.st.unexpected), strings.Join(c.st.unexpected[:min(8, len(c.st.unexpected))], "\n"))
	}
}

// check checks what is left: every live pod with a unique address, on its
// eth0, in its Pod's status and its WorkloadEndpoint, and IPAM holding it
// for the pod's sandbox and nothing else; each node's cali interfaces and
// the pod namespaces exactly the live pods'; `calicoctl ipam check`
// finding nothing.
func (c *churner) check(ctx context.Context) {
	t, l := c.t, c.l
	t.Helper()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[netip.Addr]string{}
	wantLinks := map[string][]string{}
	for _, p := range c.live {
		if other, dup := owner[p.IP]; dup {
			t.Errorf("address %s held by live pods %s and %s", p.IP, other, p.Name)
		}
		owner[p.IP] = p.Name
		wantLinks[p.Node] = append(wantLinks[p.Node], names.VethNameForWorkload(p.Namespace, p.Name))
		var have []netip.Addr
		if err := inNS(p.NS, func() error {
			link, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
			for _, a := range addrs {
				v, _ := netip.AddrFromSlice(a.IP)
				have = append(have, v.Unmap())
			}
			return err
		}); err != nil {
			t.Errorf("pod %s's eth0: %v", p.Name, err)
		} else if !slices.Contains(have, p.IP) {
			t.Errorf("pod %s's eth0 holds %v, not its address %s", p.Name, have, p.IP)
		}
	}
	pods, err := kc.CoreV1().Pods(churnNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != len(c.live) {
		t.Errorf("%d Pods in namespace %s, %d live", len(pods.Items), churnNS, len(c.live))
	}
	for _, kp := range pods.Items {
		if p, ok := c.live[kp.Name]; !ok || kp.Status.PodIP != p.IP.String() {
			t.Errorf("Pod %s: status podIP %q, the live pod's %s (live: %v)", kp.Name, kp.Status.PodIP, p.IP, ok)
		}
	}
	out, err := l.Calicoctl(ctx, "node1", nil, "get", "workloadendpoints", "-n", churnNS, "-o", "json")
	if err != nil {
		t.Fatalf("calicoctl get workloadendpoints: %v\n%s", err, out)
	}
	var weps struct {
		Items []struct {
			Spec struct {
				Pod, Node, ContainerID string
				IPNetworks             []string `json:"ipNetworks"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &weps); err != nil {
		t.Fatalf("calicoctl get workloadendpoints -o json: %v\n%s", err, out)
	}
	for _, w := range weps.Items {
		p, ok := c.live[w.Spec.Pod]
		if !ok || w.Spec.ContainerID != p.ContainerID || w.Spec.Node != p.Node || !slices.Equal(w.Spec.IPNetworks, []string{p.IP.String() + "/32"}) {
			t.Errorf("endpoint of %s: container %s on %s with %v; the live pod (%v): %s on %s with %s", w.Spec.Pod, w.Spec.ContainerID,
				w.Spec.Node, w.Spec.IPNetworks, ok, p.ContainerID, p.Node, p.IP)
		}
	}
	if len(weps.Items) != len(c.live) {
		t.Errorf("%d endpoints for %d live pods", len(weps.Items), len(c.live))
	}
	// IPAM: its own check, and its report's allocations exactly the live
	// pods' addresses.
	report := filepath.Join(t.TempDir(), "report.json")
	out, err = l.Calicoctl(ctx, "node1", nil, "ipam", "check", "--show-problem-ips", "-o", report)
	if err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Check complete; found 0 problems.") || !strings.Contains(out, "Found 0 IPs that are allocated in IPAM but not actually in use.") {
		t.Errorf("calicoctl ipam check after the churn:\n%s", out)
	}
	ipamreport.CheckLive(t, report, owner)
	// Interfaces and namespaces.
	for _, n := range l.Nodes() {
		var have []string
		if err := inNS(n.NS, func() error {
			links, err := netlink.LinkList()
			for _, k := range links {
				if strings.HasPrefix(k.Attrs().Name, "cali") {
					have = append(have, k.Attrs().Name)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(have)
		want := wantLinks[n.Name]
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("node %s has cali interfaces %v, its live pods %v", n.Name, have, want)
		}
	}
	// Pod namespaces: the slots' and no other; a live pod's holds lo and
	// eth0, any other only lo.
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	var haveNS, wantNS []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), l.Prefix()+"pod-"+churnNS+".") {
			haveNS = append(haveNS, e.Name())
		}
	}
	for name, ns := range c.ns {
		wantNS = append(wantNS, ns)
		want := []string{"lo"}
		if _, live := c.live[name]; live {
			want = []string{"eth0", "lo"}
		}
		if have := nsLinks(t, ns); !slices.Equal(have, want) {
			t.Errorf("pod namespace %s holds %v, want %v", ns, have, want)
		}
	}
	slices.Sort(haveNS)
	slices.Sort(wantNS)
	if !slices.Equal(haveNS, wantNS) {
		t.Errorf("pod namespaces %v, the slots' %v", haveNS, wantNS)
	}
}

// collectGarbage waits for calico-kube-controllers' IPAM garbage
// collection to have run a full grace period after now: a canary, the
// sticky (immutable) address of a StatefulSet pod, is left when the pod
// goes and its StatefulSet is deleted; only the node controller's leak
// pass releases it, after the grace period, and that pass releases every
// leak seen since before the canary was (the churn's included). It
// returns how many addresses ipam check called leaked before.
func (c *churner) collectGarbage(ctx context.Context) int {
	t, l := c.t, c.l
	t.Helper()
	out, err := l.Calicoctl(ctx, "node1", nil, "ipam", "check")
	m := checkLeakedRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	var leaked int
	fmt.Sscan(m[1], &leaked)
	p, err := l.AddPodWith(ctx, "node1", churnNS, "canary-0", PodOptions{Owner: Owner{Kind: "StatefulSet", Name: "canary"},
		Annotations: map[string]string{k8s.AnnotationIPReleasePolicy: string(k8s.ReleaseImmutable)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DelPod(ctx, p.Key()); err != nil {
		t.Fatal(err)
	}
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.AppsV1().StatefulSets(churnNS).Delete(ctx, "canary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	waitFor(t, 10*stickyGrace+30*time.Second, "IPAM GC releases the canary's address (its StatefulSet deleted)", func() (bool, string) {
		s := ipamState(t, l, p.IP)
		return s == "free", s
	})
	if d := time.Since(began); d < stickyGrace {
		t.Fatalf("the canary's address was released after %s, before the grace period %s: not by the leak pass", d, stickyGrace)
	}
	t.Logf("IPAM GC released the canary's address after %s", time.Since(began).Round(time.Millisecond))
	return leaked
}

// churnLab is a lab for the churn: three nodes with Kubernetes, etcd in
// its own namespace (a calico-node SIGKILLed is the agent only, not the
// datastore: etcd outages have tests of their own), IPAM GC's grace
// period shortened.
func churnLab(t testing.TB, prefix string) *Lab {
	t.Helper()
	requireLab(t)
	l := newLab(t, Options{Name: prefix, Nodes: 3, Kubernetes: true, KubeBinDir: kubetest.Bin(t), Etcd: EtcdExternal})
	shortenIPAMGC(t, l)
	return l
}

// runLabChurn churns, checks what is left before and after garbage
// collection, then stops every pod and checks nothing is left at all.
func runLabChurn(t testing.TB, l *Lab, cfg labChurnConfig) *labChurnStats {
	t.Helper()
	ctx := context.Background()
	c := &churner{t: t, l: l, cfg: cfg, st: &labChurnStats{}, live: map[string]Pod{}, ns: map[string]string{}}
	c.run(ctx)
	t.Logf("churn: %s", c.st)
	if leaked := c.collectGarbage(ctx); leaked != 0 {
		t.Logf("before garbage collection ipam check called %d addresses leaked", leaked)
	}
	c.check(ctx)
	rng := rand.New(rand.NewPCG(cfg.seed, 1<<33))
	for name, p := range c.live {
		if err := c.stop(ctx, rng, p); err != nil {
			t.Fatal(err)
		}
		delete(c.live, name)
	}
	c.check(ctx)
	for name, ns := range c.ns {
		if err := l.forgetNS(ctx, ns); err != nil {
			t.Fatal(err)
		}
		delete(c.ns, name)
	}
	c.check(ctx) // no pod namespace is left
	return c.st
}

// labChurnSeed is CHURN_SEED, or a fresh seed; it is logged so a failing
// run's choices (which pod, node, kill and when) can be repeated.
func labChurnSeed(t testing.TB) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHURN_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("CHURN_SEED %q: %v", s, err)
		}
	}
	t.Logf("churn seed %d (CHURN_SEED=%d repeats its choices)", seed, seed)
	return seed
}

// TestLabChurn is the lab's churn of `make test`: about 1,000 plugin runs
// over three nodes, twelve pods at a time, 15% of the plugin processes and
// two calico-nodes SIGKILLed. Afterwards no two live pods share an
// address, IPAM holds nothing but theirs once calico-kube-controllers'
// garbage collection has run, no cali interface or pod namespace is left
// over, `calicoctl ipam check` finds nothing; after the last pods are
// stopped, nothing at all is left.
func TestLabChurn(t *testing.T) {
	beside(t, &otherLane)
	l := churnLab(t, "tchurn")
	runLabChurn(t, l, labChurnConfig{workers: envInt("CHURN_WORKERS", 12), slots: 2, ops: envInt("CHURN_OPS", 1000), killRate: 0.15, agentKills: 2, seed: labChurnSeed(t)})
}

// BenchmarkLabChurn is the long churn: 10,000 plugin runs (CHURN_OPS)
// with the faults and checks of TestLabChurn, six calico-nodes SIGKILLed.
// It reports pods networked (successful ADDs) per second, and its ratio
// to the same loop on the same lab with no fault injected (a fifth of the
// plugin runs, measured in the same run): the
// reference runs every part the churn runs (API server, etcd, felix's
// endpoint status), so the ratio is what the faults and their recovery
// cost, not how fast the machine is.
func BenchmarkLabChurn(b *testing.B) {
	l := churnLab(b, "bchurn")
	var st, ref *labChurnStats
	for b.Loop() {
		ops := envInt("CHURN_OPS", 10000)
		ref = runLabChurn(b, l, labChurnConfig{workers: 12, slots: 2, ops: ops / 5, seed: labChurnSeed(b)})
		st = runLabChurn(b, l, labChurnConfig{workers: 12, slots: 2, ops: ops, killRate: 0.15, agentKills: max(2, ops/1700), seed: labChurnSeed(b)})
	}
	b.ReportMetric(st.rate(), "allocs/s")
	b.ReportMetric(ref.rate(), "ref-allocs/s")
	b.ReportMetric(st.rate()/ref.rate(), "x/ref")
	b.ReportMetric(float64(st.runs.Load()), "runs")
	b.ReportMetric(float64(st.kills), "killed")
}

// envInt is the integer in the environment variable, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
