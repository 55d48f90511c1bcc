package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	palbpf "github.com/palisade-net/palisade/bpf"
)

// bpfSpec is FelixConfiguration default's spec that turns felix's eBPF
// dataplane on (Options.BPF). felix then load-balances Services itself
// and removes kube-proxy's iptables rules (bpfKubeProxyIptablesCleanupEnabled,
// true by default); where kube-proxy runs beside it (real nodes, whose
// host-networked clients still reach the API through kube-proxy's
// ClusterIP rules) the cleanup is turned off.
func bpfSpec(kubeProxy bool) string {
	if kubeProxy {
		return "bpfEnabled: true, bpfKubeProxyIptablesCleanupEnabled: false"
	}
	return "bpfEnabled: true"
}

// bpfFelixConfig turns felix's eBPF dataplane on (Options.BPF).
func bpfFelixConfig(kubeProxy bool) string {
	return "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {" + bpfSpec(kubeProxy) + "}\n"
}

// labNS runs work in one of the lab's namespaces (palbpf.NetNS).
type labNS string

func (n labNS) Do(f func() error) error { return inNS(string(n), f) }

// Fixed addresses on the fabric (198.18.0.0/24).
var (
	rrAddr     = netip.MustParseAddr("198.18.0.250")
	borderAddr = netip.MustParseAddr("198.18.0.251")
	etcdAddr   = netip.MustParseAddr("198.18.0.253")
)

// AS numbers of the lab.
const (
	ClusterAS = 64512
	BorderAS  = 65001
)

// UpTimes says how long Up's phases took.
type UpTimes struct {
	// Agents is from the start of Up until every calico-node serves its
	// status.
	Agents time.Duration
	// Sessions is how long the BGP sessions then took to establish.
	Sessions time.Duration
	// Total is the whole of Up.
	Total time.Duration
}

// Lab is a running lab. Its methods are safe for concurrent use; another
// process opens the same lab with Open.
type Lab struct {
	mu   sync.Mutex
	st   *state
	dir  string
	out  io.Writer
	lock *os.File
	// times are Up's timings (zero for a lab opened with Open).
	times UpTimes
	// kube is the client of the lab's API server, made on first use.
	kube kubernetes.Interface
	// kubeNamespaces are the Kubernetes namespaces this process has made
	// or found (name → true).
	kubeNamespaces sync.Map
}

// UpTimes says how long Up took to start the agents and establish the
// BGP sessions.
func (l *Lab) UpTimes() UpTimes { return l.times }

// Name is the lab's name.
func (l *Lab) Name() string { return l.st.Name }

// Dir is the lab's state directory.
func (l *Lab) Dir() string { return l.dir }

// Prefix is the prefix of every namespace of the lab.
func (l *Lab) Prefix() string { return l.st.Prefix }

// Options are the settings the lab runs with.
func (l *Lab) Options() Options { return l.st.Options }

// Peering is the current BGP topology.
func (l *Lab) Peering() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Peering
}

// Nodes lists the nodes.
func (l *Lab) Nodes() []Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Node(nil), l.st.Nodes...)
}

// Node returns a node by name.
func (l *Lab) Node(name string) (Node, bool) {
	for _, n := range l.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Pods lists the pods, by node then name.
func (l *Lab) Pods() []Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	pods := append([]Pod(nil), l.st.Pods...)
	sort.SliceStable(pods, func(i, j int) bool {
		if pods[i].Node != pods[j].Node {
			return nodeLess(pods[i].Node, pods[j].Node)
		}
		return pods[i].Key() < pods[j].Key()
	})
	return pods
}

// Pod returns a pod by "namespace/name".
func (l *Lab) Pod(key string) (Pod, bool) {
	for _, p := range l.Pods() {
		if p.Key() == key {
			return p, true
		}
	}
	return Pod{}, false
}

// Proc returns a process by role ("calico-node/node1", "bird/rr",
// "bird/border", "etcd").
func (l *Lab) Proc(role string) (Proc, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.st.Procs[role]
	return p, ok
}

func nodeLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// say prints a progress line.
func (l *Lab) say(format string, a ...any) {
	if l.out != nil {
		fmt.Fprintf(l.out, format+"\n", a...)
	}
}

// path is a file or directory in the state directory.
func (l *Lab) path(elem ...string) string {
	return filepath.Join(append([]string{l.dir}, elem...)...)
}

// save writes the state file; l.mu must be held.
func (l *Lab) save() error { return l.st.save(l.dir) }

// recordNS notes a namespace about to be created, before it is, so a
// failure never leaves one unrecorded.
func (l *Lab) recordNS(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Namespaces = append(l.st.Namespaces, name)
	return l.save()
}

// newNS creates and records a namespace of the lab.
func (l *Lab) newNS(ctx context.Context, suffix string) (string, error) {
	name := l.st.Prefix + suffix
	if err := l.recordNS(name); err != nil {
		return "", err
	}
	return name, addNS(ctx, name)
}

// forgetNS deletes a namespace and drops it from the record.
func (l *Lab) forgetNS(ctx context.Context, name string) error {
	if err := delNS(ctx, name); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, n := range l.st.Namespaces {
		if n == name {
			l.st.Namespaces = append(l.st.Namespaces[:i], l.st.Namespaces[i+1:]...)
			break
		}
	}
	return l.save()
}

// recordProc notes a started process.
func (l *Lab) recordProc(role string, p Proc) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Procs[role] = p
	return l.save()
}

// fabricNS is the namespace holding the bridge.
func (l *Lab) fabricNS() string { return l.st.Prefix + "fabric" }

// lockDir takes the lab's lock, waiting for another process holding it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking lab %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking lab %s: %w", dir, err)
	}
	return f, nil
}

// Up builds a lab: fabric, etcd, route reflector and border router when
// asked, then the nodes, and waits for every BGP session. A failure part
// way removes everything it made.
func Up(ctx context.Context, o Options) (_ *Lab, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab creates network namespaces: run it as root")
	}
	dir := filepath.Join(o.StateRoot, o.Name)
	if err := os.MkdirAll(o.StateRoot, 0o755); err != nil {
		return nil, fmt.Errorf("lab %q: %w", o.Name, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lab %q already exists (%s): remove it with `lab down --name %s`", o.Name, dir, o.Name)
		}
		return nil, fmt.Errorf("lab %q: %w", o.Name, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l := &Lab{dir: dir, out: o.Progress, lock: lock, st: &state{
		Name: o.Name, Prefix: "pl-" + o.Name + "-", Created: time.Now(), Options: o,
		Peering: PeeringMesh, Procs: map[string]Proc{}, NextIndex: 1,
	}}
	if err := l.save(); err != nil {
		l.release()
		os.RemoveAll(dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			l.say("✗ %v", err)
			l.say("removing what was made")
			if derr := l.Down(context.Background()); derr != nil {
				err = fmt.Errorf("%w (and removing the lab: %v)", err, derr)
			}
		}
	}()
	began := time.Now()
	l.say("lab %s: %d node(s), route reflector %s, etcd %s, border %v, kubernetes %v; state in %s", o.Name, o.Nodes, o.RR, o.Etcd, o.Border, o.Kubernetes, dir)
	if err := l.makeFabric(ctx); err != nil {
		return nil, err
	}
	if o.Etcd != EtcdEmbedded {
		if err := l.startEtcd(ctx); err != nil {
			return nil, err
		}
	}
	first, err := l.addNodeNS(ctx)
	if err != nil {
		return nil, err
	}
	var rest []Node
	for i := 1; i < o.Nodes; i++ {
		n, err := l.addNodeNS(ctx)
		if err != nil {
			return nil, err
		}
		rest = append(rest, n)
	}
	if err := l.pinNeighbors(ctx, l.Nodes(), l.Nodes()); err != nil {
		return nil, err
	}
	if o.RR != RRNone {
		if err := l.startBird(ctx, "rr"); err != nil {
			return nil, err
		}
	}
	if o.Border {
		if err := l.startBird(ctx, "border"); err != nil {
			return nil, err
		}
		if err := l.makeExternal(ctx); err != nil {
			return nil, err
		}
	}
	if o.Kubelet {
		if err := l.upRealNodes(ctx, append([]Node{first}, rest...)); err != nil {
			return nil, err
		}
		l.times.Total = time.Since(began)
		l.say("✓ lab %s is up after %s", o.Name, l.times.Total.Round(10*time.Millisecond))
		return l, nil
	}
	if o.Kubernetes {
		if err := l.startKube(ctx); err != nil {
			return nil, err
		}
		for _, n := range append([]Node{first}, rest...) {
			if err := l.registerKubeNode(ctx, n); err != nil {
				return nil, err
			}
		}
	}
	if err := l.startNode(ctx, first); err != nil {
		return nil, err
	}
	if o.Etcd == EtcdEmbedded {
		if err := l.takeJoinFile(); err != nil {
			return nil, err
		}
	}
	if err := l.applyTopology(ctx, o.Peering); err != nil {
		return nil, err
	}
	// In-cluster reflectors get their cluster ID once their Node exists.
	reflector := map[string]bool{}
	if o.Peering == PeeringNodeRR {
		for _, n := range nodeRRs(append([]Node{first}, rest...)) {
			reflector[n.Name] = true
		}
		if reflector[first.Name] {
			if err := l.makeReflector(ctx, first); err != nil {
				return nil, err
			}
		}
	}
	if o.BPF {
		// Before the other nodes start: their felix starts on eBPF.
		// Node 1's moves over from iptables.
		l.say("calicoctl apply: FelixConfiguration default bpfEnabled: true")
		if err := l.Apply(ctx, bpfFelixConfig(o.KubeProxy)); err != nil {
			return nil, err
		}
	}
	if o.FloatingIPs {
		if err := l.enableFloatingIPs(ctx); err != nil {
			return nil, err
		}
	}
	errc := make(chan error, len(rest))
	for _, n := range rest {
		go func() {
			err := l.startNode(ctx, n)
			if err == nil && reflector[n.Name] {
				err = l.makeReflector(ctx, n)
			}
			errc <- err
		}()
	}
	var errs []error
	for range rest {
		errs = append(errs, <-errc)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l.times.Agents = time.Since(began)
	l.say("✓ %d calico-node(s) running after %s", o.Nodes, l.times.Agents.Round(10*time.Millisecond))
	if o.Kubernetes {
		if err := l.startKubeControllers(ctx); err != nil {
			return nil, err
		}
	}
	if o.KubeProxy {
		if err := l.startKubeProxies(ctx, l.Nodes()); err != nil {
			return nil, err
		}
	}
	if l.times.Sessions, err = l.WaitSessions(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	l.times.Total = time.Since(began)
	l.say("✓ lab %s is up after %s", o.Name, l.times.Total.Round(10*time.Millisecond))
	return l, nil
}

// Open opens an existing lab by name (another process's, or an earlier
// run's). Close releases it.
func Open(root, name string, progress io.Writer) (*Lab, error) {
	dir := filepath.Join(stateRoot(root), name)
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		return nil, fmt.Errorf("no lab %q in %s", name, stateRoot(root))
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	st, err := loadState(dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return &Lab{st: st, dir: dir, out: progress, lock: lock}, nil
}

// List names the labs under root.
func List(root string) ([]string, error) {
	ents, err := os.ReadDir(stateRoot(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(stateRoot(root), e.Name(), stateFile)); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Close releases the lab's lock (the lab keeps running).
func (l *Lab) Close() error { l.release(); return nil }

func (l *Lab) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// Down stops every process and deletes every namespace and file of the
// lab, including namespaces with its prefix that were never recorded.
func (l *Lab) Down(ctx context.Context) error {
	l.say("removing lab %s", l.st.Name)
	l.mu.Lock()
	procs := make(map[string]Proc, len(l.st.Procs))
	for k, v := range l.st.Procs {
		procs[k] = v
	}
	nss := append([]string(nil), l.st.Namespaces...)
	for _, p := range l.st.Pods {
		nss = append(nss, p.NS)
	}
	l.mu.Unlock()
	var errs []error
	// calico-node first (node 1 last: it may serve etcd), then BIRD and
	// etcd.
	var wg sync.WaitGroup
	var emu sync.Mutex
	stop := func(role string, p Proc) {
		defer wg.Done()
		if err := p.Stop(5 * time.Second); err != nil {
			emu.Lock()
			errs = append(errs, err)
			emu.Unlock()
		}
	}
	first := ""
	if len(l.st.Nodes) > 0 {
		first = "calico-node/" + l.st.Nodes[0].Name
	}
	for role, p := range procs {
		if strings.HasPrefix(role, "calico-node/") && role != first {
			wg.Add(1)
			go stop(role, p)
		}
	}
	wg.Wait()
	for role, p := range procs {
		if !strings.HasPrefix(role, "calico-node/") || role == first {
			wg.Add(1)
			go stop(role, p)
		}
	}
	wg.Wait()
	// Real nodes: what their containerd and kubelet leave (pods, shims,
	// cgroups, the mount namespaces holding their mounts), found by name
	// even when the lab was killed before recording it.
	for _, n := range l.st.Nodes {
		if err := removeNodeCgroups(l.cgroupName(n.Name)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, cg := range labCgroups(l.st.Prefix) {
		if err := removeNodeCgroups(cg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeMountNamespaces(l.mountNSDir()); err != nil {
		errs = append(errs, err)
	}
	// The eBPF dataplane's pins outlive a namespace: removed while the
	// nodes' namespaces still exist.
	for _, n := range l.st.Nodes {
		if _, err := os.Stat(nsPath(n.NS)); err != nil {
			continue
		}
		if err := palbpf.RemoveAll("", labNS(n.NS)); err != nil {
			errs = append(errs, err)
		}
	}
	// Namespaces in reverse order of creation, then any stray one with
	// the lab's prefix.
	seen := map[string]bool{}
	for i := len(nss) - 1; i >= 0; i-- {
		if seen[nss[i]] {
			continue
		}
		seen[nss[i]] = true
		if err := delNS(ctx, nss[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), l.st.Prefix) && !seen[e.Name()] {
				if err := delNS(ctx, e.Name()); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		l.release()
		return fmt.Errorf("removing lab %s: %w (state kept in %s; run down again)", l.st.Name, err, l.dir)
	}
	if err := os.RemoveAll(l.dir); err != nil {
		l.release()
		return fmt.Errorf("removing lab %s: %w", l.st.Name, err)
	}
	l.release()
	l.say("✓ lab %s removed", l.st.Name)
	return nil
}

// makeFabric creates the fabric namespace and its bridge.
func (l *Lab) makeFabric(ctx context.Context) error {
	l.say("creating fabric namespace %s with bridge br0 (198.18.0.0/24)", l.fabricNS())
	ns, err := l.newNS(ctx, "fabric")
	if err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", ns, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if _, err = run(ctx, "ip", "-n", ns, "link", "set", "br0", "up"); err != nil {
		return err
	}
	if l.st.Options.Subnets == 2 {
		return l.makeRouter(ctx)
	}
	return nil
}

// attachNS makes a namespace attached to the fabric at addr; port names
// its end on the bridge.
func (l *Lab) attachNS(ctx context.Context, suffix, port string, addr netip.Addr) (string, error) {
	ns, err := l.newNS(ctx, suffix)
	if err != nil {
		return "", err
	}
	if err := attach(ctx, l.fabricNS(), port, ns, netip.PrefixFrom(addr, 24).String()); err != nil {
		return "", err
	}
	return ns, nil
}
