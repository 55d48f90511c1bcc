package cniplugin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/testsupport/ipamreport"
)

// churnConfig sizes one churn run.
type churnConfig struct {
	nodes, workersPerNode, slotsPerWorker int
	// ops is how many plugin invocations to make, about.
	ops int
	// killRate is the share of plugin processes SIGKILLed at a random
	// moment of their run.
	killRate float64
	// failRate is the share of ADDs given a configuration the kernel
	// refuses (an MTU of 70000), which must roll back.
	failRate float64
	seed     uint64
}

// churnStats is what a churn run did.
type churnStats struct {
	mu                        sync.Mutex
	ops, kills, adds, addsOK  int
	dels, delRetries          int
	injectedFailures          int
	unexpected                []string
	replaced                  int
	elapsed, addTime, delTime time.Duration
}

func (s *churnStats) add(f func(s *churnStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// sandbox is one pod sandbox: a container ID in a network namespace.
type sandbox struct {
	pod, cid string
	ns       *netNS
}

// churnNode is a node of the churn, with the sandboxes live on it.
type churnNode struct {
	*node
	conf, badConf []byte
	mu            sync.Mutex
	live          map[string]sandbox // by container ID
}

// TestChurn is the short churn of `make test`: about 1,000 ADDs and DELs
// of the calico plugin over three nodes, nine at a time, 15% of the plugin
// processes SIGKILLed at a random moment and 5% of the ADDs failing in the
// kernel, DELs retried until they succeed as kubelet does, sandboxes
// replaced before the old one's DEL. Then every live pod has a unique
// address on its interface and its endpoint, IPAM holds nothing else after
// GC, no interface is left over and `calicoctl ipam check` finds nothing;
// after the last DELs, nothing at all is left.
func TestChurn(t *testing.T) {
	st := runChurn(t, churnConfig{nodes: 3, workersPerNode: 3, slotsPerWorker: 2, ops: 1000, killRate: 0.15, failRate: 0.05, seed: churnSeed(t)})
	t.Logf("churn: %d plugin runs (%d ADD, %d DEL, %d DEL retries), %d killed, %d injected failures, %d sandboxes replaced, %d pods networked in %s: %.1f allocations/s",
		st.ops, st.adds, st.dels, st.delRetries, st.kills, st.injectedFailures, st.replaced, st.addsOK, st.elapsed.Round(time.Millisecond),
		float64(st.addsOK)/st.elapsed.Seconds())
}

// BenchmarkChurn is the long churn: 5,000 plugin runs over three nodes,
// twelve at a time, with the same faults and checks as TestChurn. It
// reports successful ADDs per second, and their ratio to the ADDs per
// second of the reference bridge + host-local, twelve at a time on one
// node, measured in the same run.
func BenchmarkChurn(b *testing.B) {
	var st *churnStats
	var ref float64
	for i := 0; i < b.N; i++ {
		st = runChurn(b, churnConfig{nodes: 3, workersPerNode: 4, slotsPerWorker: 2, ops: 5000, killRate: 0.15, failRate: 0.05, seed: churnSeed(b)})
		ref = refChurnRate(b, 12, 25)
	}
	rate := float64(st.addsOK) / st.elapsed.Seconds()
	b.Logf("churn: %d plugin runs (%d ADD, %d DEL, %d DEL retries), %d killed, %d injected failures, %d sandboxes replaced, %d pods networked in %s",
		st.ops, st.adds, st.dels, st.delRetries, st.kills, st.injectedFailures, st.replaced, st.addsOK, st.elapsed.Round(time.Millisecond))
	b.ReportMetric(rate, "allocs/s")
	b.ReportMetric(ref, "ref-allocs/s")
	b.ReportMetric(rate/ref, "x/ref")
	b.ReportMetric(float64(st.ops), "runs")
	b.ReportMetric(float64(st.kills), "killed")
}

// refChurnRate runs the reference bridge + host-local ADD then DEL, cycles
// times in each of workers parallel pods on one node, and returns the
// ADDs per second.
func refChurnRate(b *testing.B, workers, cycles int) float64 {
	c := newCluster(b)
	n := c.newNode("ref")
	ref := confList(b, "1.0.0", "ref-network", []map[string]any{{
		"type": "bridge", "bridge": "plref0", "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(c.dir, "host-local"),
			"ranges": [][]map[string]string{{{"subnet": "10.74.0.0/16"}}}},
	}})
	pods := make([]*pod, workers)
	for i := range pods {
		pods[i] = n.newPod("ref", fmt.Sprintf("ref-%d", i))
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				if _, err := n.add(ref, p.runtimeConf(true)); err != nil {
					b.Errorf("reference ADD: %v", err)
					return
				}
				if err := n.del(ref, p.runtimeConf(true)); err != nil {
					b.Errorf("reference DEL: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(workers*cycles) / time.Since(start).Seconds()
}

// churnSeed is CHURN_SEED, or a fresh seed; it is logged so a failing run
// can be repeated.
func churnSeed(t testing.TB) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHURN_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("churn seed %d (CHURN_SEED=%d repeats it)", seed, seed)
	return seed
}

func runChurn(t testing.TB, cfg churnConfig) *churnStats {
	c := newCluster(t)
	c.addPool("pool-a", "10.79.0.0/16", 26)
	nodes := make([]*churnNode, cfg.nodes)
	for i := range nodes {
		n := c.newNode(fmt.Sprintf("node%d", i+1))
		node := &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: n.name}}
		if _, err := c.store.Create(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		conf := map[string]any{"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "calico", "log_level": "warning",
			"log_file_path": filepath.Join(c.dir, n.name+".log"), "etcd_endpoints": n.etcd, "nodename": n.name, "mtu": 1450,
			"datastore_timeout": "10s", "ipam": map[string]any{"type": "calico-ipam"}}
		good, _ := json.Marshal(conf)
		conf["mtu"] = 70000
		bad, _ := json.Marshal(conf)
		nodes[i] = &churnNode{node: n, conf: good, badConf: bad, live: map[string]sandbox{}}
	}

	st := &churnStats{}
	perWorker := max(1, cfg.ops/(cfg.nodes*cfg.workersPerNode))
	start := time.Now()
	var wg sync.WaitGroup
	for ni, n := range nodes {
		for w := range cfg.workersPerNode {
			// Each slot is a pod name with two namespaces: the live
			// sandbox's and its replacement's.
			type slot struct {
				pod  string
				ns   [2]*netNS
				cur  int
				live *sandbox
			}
			slots := make([]*slot, cfg.slotsPerWorker)
			for i := range slots {
				name := fmt.Sprintf("p%d-%d-%d", ni, w, i)
				slots[i] = &slot{pod: name, ns: [2]*netNS{c.newNS(name + "a"), c.newNS(name + "b")}}
			}
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(ni*100+w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for runs := 0; runs < perWorker; {
					s := slots[rng.IntN(len(slots))]
					switch {
					case s.live == nil:
						sb := sandbox{pod: s.pod, cid: newCID(rng), ns: s.ns[s.cur]}
						ok, n2 := n.churnAdd(t, rng, cfg, st, sb)
						runs += n2
						if ok {
							s.live = &sb
						} else {
							runs += n.churnDel(t, rng, cfg, st, sb)
						}
					case rng.Float64() < 0.25:
						// The pod's sandbox is replaced: the new one is
						// set up before the old one's (late) DEL.
						old, next := *s.live, 1-s.cur
						s.live = nil
						sb := sandbox{pod: s.pod, cid: newCID(rng), ns: s.ns[next]}
						ok, n2 := n.churnAdd(t, rng, cfg, st, sb)
						runs += n2
						if ok {
							s.live, s.cur = &sb, next
							st.add(func(s *churnStats) { s.replaced++ })
						} else {
							runs += n.churnDel(t, rng, cfg, st, sb)
						}
						runs += n.churnDel(t, rng, cfg, st, old)
					default:
						runs += n.churnDel(t, rng, cfg, st, *s.live)
						s.live = nil
					}
				}
			}()
		}
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	if len(st.unexpected) > 0 {
		t.Errorf("%d plugin runs failed without being killed or given a bad MTU:\n%s", len(st.unexpected), strings.Join(st.unexpected[:min(5, len(st.unexpected))], "\n"))
	}

	checkChurn(t, c, nodes, true)
	for _, n := range nodes {
		for _, sb := range n.live {
			if ok, _, out := n.invoke(t, n.conf, "DEL", sb, 0); !ok {
				t.Fatalf("final DEL of %s on %s: %s", sb.pod, n.name, out)
			}
		}
		n.live = map[string]sandbox{}
	}
	checkChurn(t, c, nodes, false)
	return st
}

// churnAdd runs ADD for sb, maybe killed or with a bad MTU, and records
// sb live when it succeeded. It returns that, and the runs it made.
func (n *churnNode) churnAdd(t testing.TB, rng *rand.Rand, cfg churnConfig, st *churnStats, sb sandbox) (bool, int) {
	conf, injected := n.conf, rng.Float64() < cfg.failRate
	if injected {
		conf = n.badConf
	}
	kill := killAfter(rng, cfg)
	start := time.Now()
	ok, killed, out := n.invoke(t, conf, "ADD", sb, kill)
	d := time.Since(start)
	st.add(func(s *churnStats) {
		s.ops++
		s.adds++
		s.addTime += d
		switch {
		case killed:
			s.kills++
		case ok && injected:
			s.unexpected = append(s.unexpected, fmt.Sprintf("ADD %s with MTU 70000 succeeded", sb.pod))
		case injected:
			s.injectedFailures++
		case !ok:
			s.unexpected = append(s.unexpected, fmt.Sprintf("ADD %s: %s", sb.pod, out))
		}
		if ok {
			s.addsOK++
		}
	})
	if ok {
		n.mu.Lock()
		n.live[sb.cid] = sb
		n.mu.Unlock()
	}
	return ok, 1
}

// churnDel runs DEL for sb until it succeeds, as kubelet retries it (its
// runs may be killed too), and forgets sb. It returns the runs it made.
func (n *churnNode) churnDel(t testing.TB, rng *rand.Rand, cfg churnConfig, st *churnStats, sb sandbox) int {
	for attempt := 1; attempt <= 50; attempt++ {
		start := time.Now()
		ok, killed, out := n.invoke(t, n.conf, "DEL", sb, killAfter(rng, cfg))
		d := time.Since(start)
		st.add(func(s *churnStats) {
			s.ops++
			s.dels++
			s.delTime += d
			if attempt > 1 {
				s.delRetries++
			}
			if killed {
				s.kills++
			} else if !ok {
				s.unexpected = append(s.unexpected, fmt.Sprintf("DEL %s: %s", sb.pod, out))
			}
		})
		if ok {
			n.mu.Lock()
			delete(n.live, sb.cid)
			n.mu.Unlock()
			return attempt
		}
	}
	t.Errorf("DEL of %s on %s never succeeded", sb.pod, n.name)
	return 50
}

// killAfter is when to kill the next plugin run: never, or at a random
// moment of a typical run.
func killAfter(rng *rand.Rand, cfg churnConfig) time.Duration {
	if rng.Float64() >= cfg.killRate {
		return 0
	}
	return time.Duration(1+rng.IntN(60_000)) * time.Microsecond
}

func newCID(rng *rand.Rand) string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// invoke runs the calico plugin once, as a runtime does, in the node's
// namespace, killing it with SIGKILL after kill when that is set. It
// reports success, whether the kill landed, and the plugin's output.
func (n *churnNode) invoke(t testing.TB, conf []byte, command string, sb sandbox, kill time.Duration) (ok, killed bool, out string) {
	cmd := exec.Command(filepath.Join(binDir, "calico"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_PATH="+binDir)
	if sb.ns != nil {
		cmd.Env = append(cmd.Env, "CNI_CONTAINERID="+sb.cid, "CNI_NETNS="+sb.ns.Path(), "CNI_IFNAME=eth0",
			"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=churn;K8S_POD_NAME="+sb.pod+";K8S_POD_INFRA_CONTAINER_ID="+sb.cid)
	}
	cmd.Stdin = strings.NewReader(string(conf))
	var buf strings.Builder
	cmd.Stdout = &buf
	if err := n.inNode(cmd.Start); err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	if kill > 0 {
		timer := time.AfterFunc(kill, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		defer timer.Stop()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, isWS := ee.Sys().(syscall.WaitStatus); isWS && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return false, true, "killed"
		}
	}
	return err == nil, false, buf.String()
}

// checkChurn checks what the churn left: with live pods, after GC; without
// (after the last DELs), that nothing is left at all.
func checkChurn(t testing.TB, c *cluster, nodes []*churnNode, withLive bool) {
	t.Helper()
	ctx := context.Background()
	want := map[string]sandbox{} // container ID → live sandbox
	nodeOf := map[string]*churnNode{}
	for _, n := range nodes {
		for cid, sb := range n.live {
			want[cid], nodeOf[cid] = sb, n
		}
	}
	// GC, as a runtime and calico-node run it: stale handles, and blocks
	// left empty.
	{
		for _, n := range nodes {
			var valid []map[string]string
			for cid := range n.live {
				valid = append(valid, map[string]string{"containerID": cid, "ifname": "eth0"})
			}
			var conf map[string]any
			_ = json.Unmarshal(n.conf, &conf)
			conf["cniVersion"] = "1.1.0"
			conf["cni.dev/valid-attachments"] = valid
			gc, _ := json.Marshal(conf)
			if ok, _, out := n.invoke(t, gc, "GC", sandbox{}, 0); !ok {
				t.Fatalf("GC on %s: %s", n.name, out)
			}
			if _, err := c.alloc.ReleaseUnusedBlocks(ctx, n.name, &ipam.EmptyBlocks{}, 0, time.Now()); err != nil {
				t.Fatalf("releasing unused blocks of %s: %v", n.name, err)
			}
		}
	}

	// Endpoints: one per live sandbox, with a unique address, allocated
	// to the sandbox's handle and on its interface.
	weps, _, err := c.store.List(ctx, datastore.ListOptions{Kind: v3.KindWorkloadEndpoint})
	if err != nil {
		t.Fatal(err)
	}
	alloc := c.allocated(t)
	owner := map[netip.Addr]string{}
	for _, r := range weps {
		ep := r.(*v3.WorkloadEndpoint)
		sb, ok := want[ep.Spec.ContainerID]
		if !ok {
			t.Errorf("endpoint %s of container %s, which is not live", ep.Name, ep.Spec.ContainerID)
			continue
		}
		for _, ipn := range ep.Spec.IPNetworks {
			ip := netip.MustParsePrefix(ipn).Addr()
			if other, dup := owner[ip]; dup {
				t.Errorf("address %s held by live pods %s and %s", ip, other, sb.pod)
			}
			owner[ip] = sb.pod
			if alloc[ip] != "k8s-pod-network."+sb.cid {
				t.Errorf("pod %s's address %s is allocated to %q in IPAM", sb.pod, ip, alloc[ip])
			}
			if got := podAddrs(t, sb.ns); !slices.Contains(got, ip) {
				t.Errorf("pod %s: eth0 holds %v, its endpoint %s", sb.pod, got, ip)
			}
		}
	}
	if len(weps) != len(want) {
		t.Errorf("%d endpoints for %d live sandboxes", len(weps), len(want))
	}
	if len(alloc) != len(owner) {
		t.Errorf("IPAM holds %d addresses, live pods %d", len(alloc), len(owner))
	}
	// Interfaces: the node's cali veths are exactly its live pods'.
	for _, n := range nodes {
		var have []string
		if err := n.inNode(func() error {
			links, err := netlink.LinkList()
			for _, l := range links {
				if strings.HasPrefix(l.Attrs().Name, "cali") {
					have = append(have, l.Attrs().Name)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var wantLinks []string
		for _, sb := range n.live {
			wantLinks = append(wantLinks, hostVeth(&pod{namespace: "churn", name: sb.pod}, true))
		}
		slices.Sort(have)
		slices.Sort(wantLinks)
		if !slices.Equal(have, wantLinks) {
			t.Errorf("node %s has cali interfaces %v, live pods %v", n.name, have, wantLinks)
		}
	}
	// Blocks: each one affine to a node holds a live address, or is the
	// node's only block.
	blocks, err := c.alloc.ListBlocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, b := range blocks {
		perNode[b.Host]++
	}
	for _, b := range blocks {
		if len(b.Allocations) == 0 && perNode[b.Host] > 1 {
			t.Errorf("block %s of %s is empty after GC while the node has %d blocks", b.CIDR, b.Host, perNode[b.Host])
		}
	}
	// And IPAM's own check.
	report := filepath.Join(c.dir, "report.json")
	cmd := exec.Command(filepath.Join(binDir, "calicoctl"), "ipam", "check", "-o", report)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS="+c.endpoints[0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Check complete; found 0 problems.") {
		t.Errorf("ipam check after churn found problems:\n%s", out)
	}
	ipamreport.CheckLive(t, report, owner)
	if !withLive {
		hs, err := c.alloc.ListHandles(ctx)
		if err != nil || len(hs) != 0 {
			t.Errorf("handles left after the last DELs: %v (%v)", hs, err)
		}
	}
}

// podAddrs are the addresses on a pod's eth0.
func podAddrs(t testing.TB, n *netNS) []netip.Addr {
	var out []netip.Addr
	err := n.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return nil
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		for _, a := range addrs {
			ip, _ := netip.AddrFromSlice(a.IP)
			out = append(out, ip.Unmap())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
