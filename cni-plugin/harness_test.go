package cniplugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// refPluginDir holds Debian's reference CNI plugins.
const refPluginDir = "/usr/lib/cni"

// binDir holds the calico and calico-ipam binaries under test.
var binDir string

func TestMain(m *testing.M) {
	code := run(m)
	stopSharedKube()
	os.Exit(code)
}

func run(m *testing.M) int {
	if dir := os.Getenv("PALISADE_BIN"); dir != "" {
		binDir = dir
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "palisade-cni-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for name, pkg := range map[string]string{"calico": "./cmd/calico", "calico-ipam": "./cmd/calico-ipam", "calicoctl": "../calicoctl/cmd/calicoctl"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", name, err, out)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	if _, err := os.Stat(filepath.Join(refPluginDir, "host-local")); err != nil {
		t.Skip("reference CNI plugins are not installed in " + refPluginDir + " (Debian containernetworking-plugins)")
	}
}

// netNS is a named network namespace the test made.
type netNS struct {
	ns.NetNS
	name string
}

// newNamespaceFactory returns a maker of namespaces named with a prefix
// unique to the test ("pltest-<random>-"), each deleted when the test ends.
func newNamespaceFactory(t testing.TB) func(name string) *netNS {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "pltest-" + hex.EncodeToString(b) + "-"
	return func(name string) *netNS {
		t.Helper()
		full := prefix + name
		if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", full, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", full).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", full, err, out)
			}
		})
		n, err := ns.GetNS("/run/netns/" + full)
		if err != nil {
			t.Fatalf("opening netns %s: %v", full, err)
		}
		t.Cleanup(func() { n.Close() })
		return &netNS{NetNS: n, name: full}
	}
}

// cluster is one etcd with a store for the test to read and seed.
type cluster struct {
	t         testing.TB
	endpoints []string
	store     *etcdv3.Store
	alloc     *ipam.Allocator
	newNS     func(string) *netNS
	dir       string
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	requireRoot(t)
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("connecting to etcd %v: %v", endpoints, err)
	}
	t.Cleanup(func() { store.Close() })
	return &cluster{t: t, endpoints: endpoints, store: store, alloc: ipam.New(store, store.KV()),
		newNS: newNamespaceFactory(t), dir: t.TempDir()}
}

// addPool creates an IP pool.
func (c *cluster) addPool(name, cidr string, blockSize int) {
	c.t.Helper()
	c.addPoolSpec(name, v3.IPPoolSpec{CIDR: cidr, BlockSize: blockSize})
}

// addPoolSpec creates the IP pool name with spec, defaulted as calicoctl
// would.
func (c *cluster) addPoolSpec(name string, spec v3.IPPoolSpec) {
	c.t.Helper()
	p := &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: name}, Spec: spec}
	v3.Default(p)
	if _, err := c.store.Create(context.Background(), p); err != nil {
		c.t.Fatalf("creating ippool %q %s: %v", name, spec.CIDR, err)
	}
}

// node is a test node: a namespace playing the host, where the plugins run,
// with a loopback proxy to etcd inside it.
type node struct {
	c    *cluster
	name string
	ns   *netNS
	etcd string // etcd endpoint reachable from inside the node
	cut  *proxy
}

func (c *cluster) newNode(name string) *node {
	c.t.Helper()
	n := &node{c: c, name: name, ns: c.newNS(name)}
	err := n.ns.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("node %s: %v", name, err)
	}
	// The listening socket belongs to the node's namespace; the proxy's
	// dials to etcd happen on the test's own threads.
	listen := func(addr string) (l net.Listener, err error) {
		err = n.ns.Do(func(ns.NetNS) error {
			l, err = net.Listen("tcp", addr)
			return err
		})
		return l, err
	}
	if n.cut, err = startProxy(c.t, strings.TrimPrefix(c.endpoints[0], "http://"), listen); err != nil {
		c.t.Fatalf("node %s: %v", name, err)
	}
	n.etcd = "http://" + n.cut.addr
	return n
}

// pod is a workload: its namespace and its CNI identity.
type pod struct {
	ns          *netNS
	namespace   string
	name        string
	containerID string
	ifName      string
}

func (n *node) newPod(namespace, name string) *pod {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return &pod{ns: n.c.newNS("p" + hex.EncodeToString(b[:4])), namespace: namespace, name: name,
		containerID: hex.EncodeToString(b), ifName: "eth0"}
}

func (p *pod) runtimeConf(k8s bool) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.ns.Path(), IfName: p.ifName}
	if k8s {
		rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace}, {"K8S_POD_NAME", p.name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.containerID}}
	}
	return rt
}

// calicoConf is a conflist with the calico plugin first, then extra.
func (n *node) calicoConf(cniVersion string, ipamConf map[string]any, extra ...map[string]any) *libcni.NetworkConfigList {
	n.c.t.Helper()
	if ipamConf == nil {
		ipamConf = map[string]any{"type": "calico-ipam"}
	}
	calico := map[string]any{
		"type": "calico", "log_level": "debug", "log_file_path": filepath.Join(n.c.dir, "calico.log"),
		"datastore_type": "etcdv3", "etcd_endpoints": n.etcd, "nodename": n.name, "mtu": 1450,
		"datastore_timeout": "5s", "ipam": ipamConf,
	}
	return confList(n.c.t, cniVersion, "k8s-pod-network", append([]map[string]any{calico}, extra...))
}

func confList(t testing.TB, cniVersion, name string, plugins []map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatalf("conflist %s: %v", raw, err)
	}
	return list
}

// cni is libcni with the test's plugin path and cache directory.
func (n *node) cni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{binDir, refPluginDir, n.c.dir}, filepath.Join(n.c.dir, "cache"), nil)
}

// inNode runs fn with the calling thread in the node's namespace, so
// plugins it executes run there too.
func (n *node) inNode(fn func() error) error {
	return n.ns.Do(func(ns.NetNS) error { return fn() })
}

func (n *node) add(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := n.inNode(func() (err error) {
		res, err = n.cni().AddNetworkList(context.Background(), list, rt)
		return err
	})
	return res, err
}

func (n *node) check(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.inNode(func() error { return n.cni().CheckNetworkList(context.Background(), list, rt) })
}

func (n *node) del(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.inNode(func() error { return n.cni().DelNetworkList(context.Background(), list, rt) })
}

// proxy forwards TCP connections accepted in a node's namespace to etcd.
// Cutting it closes its listener and every connection, so that new ones
// are refused, as a dead etcd's port refuses them; restore listens again
// on the same address. After dropAnswerTo(marker) it forwards requests as
// usual but drops etcd's answer to the first one carrying marker and cuts:
// etcd applied that request, and its client never hears so.
type proxy struct {
	target string
	addr   string
	listen func(addr string) (net.Listener, error)
	mu     sync.Mutex
	l      net.Listener
	isCut  bool
	conns  []net.Conn
	marker []byte
}

func startProxy(t testing.TB, target string, listen func(string) (net.Listener, error)) (*proxy, error) {
	l, err := listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{target: target, addr: l.Addr().String(), listen: listen, l: l}
	t.Cleanup(p.cut)
	go p.serve(l)
	return p, nil
}

func (p *proxy) serve(l net.Listener) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *proxy) forward(in net.Conn) {
	// Unlocked goroutines run on threads in the test's own namespace.
	runtime.Gosched()
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.isCut {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns = append(p.conns, in, out)
	marker := p.marker
	p.mu.Unlock()
	var sawMarker atomic.Bool
	go func() {
		defer out.Close()
		buf := make([]byte, 64<<10)
		var tail []byte
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if len(marker) > 0 {
					window := append(tail, buf[:n]...)
					if bytes.Contains(window, marker) {
						sawMarker.Store(true)
					}
					tail = append([]byte(nil), window[max(0, len(window)-len(marker)):]...)
				}
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := out.Read(buf)
		if n > 0 && sawMarker.Load() {
			// etcd answered the marked request: lose the answer.
			p.cut()
			return
		}
		if n > 0 {
			if _, werr := in.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	in.Close()
}

// dropAnswerTo makes the proxy lose etcd's answer to the next request
// carrying marker, and cut.
func (p *proxy) dropAnswerTo(marker []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = marker
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isCut {
		return
	}
	p.isCut = true
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) restore(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isCut {
		return
	}
	l, err := p.listen(p.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	p.l, p.isCut, p.marker = l, false, nil
	go p.serve(l)
}

// confWith sets key on the first plugin of list.
func confWith(t testing.TB, list *libcni.NetworkConfigList, key string, value any) *libcni.NetworkConfigList {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		t.Fatal(err)
	}
	plugins := raw["plugins"].([]any)
	plugins[0].(map[string]any)[key] = value
	var ps []map[string]any
	for _, p := range plugins {
		ps = append(ps, p.(map[string]any))
	}
	return confList(t, raw["cniVersion"].(string), raw["name"].(string), ps)
}
