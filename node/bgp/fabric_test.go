package bgp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/testsupport/udpflow"
	"github.com/palisade-net/palisade/node/bgp/internal/nstest"
	"github.com/palisade-net/palisade/node/bgp/kernel"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the testnode build when the run ends: every run of
// this package used to leave a directory with the binary in /tmp.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// testnode builds the node binary once per test run.
func testnode(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "plbgp-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "testnode")
		out, err := exec.Command("go", "build", "-o", binPath, "./internal/testnode").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building testnode: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// fabric is a lab: a bridge namespace with etcd reachable at
// 198.18.0.254:2379 (proxied to the test's embedded etcd), nodes attached.
type fabric struct {
	t     testing.TB
	lab   *nstest.Lab
	br    string
	store *etcdv3.Store
	alloc *ipam.Allocator
	ns    map[string]string // node name → namespace
	procs map[string]*exec.Cmd
	logs  map[string]string // node name → its process's log file
	// etcd is the test's etcd on loopback, which etcdAddr proxies to.
	etcd string
	// etcdSent counts the bytes etcd sent the nodes through the proxy.
	etcdSent atomic.Int64
}

const etcdAddr = "198.18.0.254:2379"

func newFabric(t testing.TB) *fabric {
	lab := nstest.New(t)
	f := &fabric{t: t, lab: lab, ns: map[string]string{}, procs: map[string]*exec.Cmd{}, logs: map[string]string{}}
	f.br = lab.Bridge("fab")
	lab.Run("ip", "-n", f.br, "addr", "add", "198.18.0.254/24", "dev", "br0")
	lab.Run("ip", "-n", f.br, "addr", "add", "fd00:198::254/64", "dev", "br0", "nodad")
	eps := etcdtest.Start(t)
	f.store = etcdtest.NewStore(t, eps)
	f.alloc = ipam.New(f.store, f.store.KV())
	f.etcd = strings.TrimPrefix(eps[0], "http://")
	f.serveEtcd(etcdAddr)
	return f
}

// serveEtcd makes etcd reachable in the lab at addr (an address of the
// bridge namespace).
func (f *fabric) serveEtcd(addr string) {
	f.t.Helper()
	var ln net.Listener
	if err := nstest.Do(f.br, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { ln.Close() })
	go proxy(ln, f.etcd, &f.etcdSent)
}

// proxy forwards connections accepted in the lab to etcd on loopback,
// counting the bytes etcd sends in sent.
func proxy(ln net.Listener, target string, sent *atomic.Int64) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			_, _ = io.Copy(countingWriter{c, sent}, u)
		}()
	}
}

// countingWriter counts what is written through it.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// addNS makes a namespace attached to the bridge with addresses.
func (f *fabric) addNS(name string, addrs ...string) string {
	ns := f.lab.NS(name)
	f.lab.Attach(f.br, ns, addrs...)
	f.ns[name] = ns
	return ns
}

// node creates a Node resource and its namespace.
func (f *fabric) node(name, v4 string, mutate func(*v3.Node)) {
	f.t.Helper()
	f.addNS(name, v4)
	n := &v3.Node{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: v4}}}
	if mutate != nil {
		mutate(n)
	}
	f.apply(n)
}

func (f *fabric) apply(r v3.Resource) {
	f.t.Helper()
	if _, err := f.store.Apply(context.Background(), r); err != nil {
		f.t.Fatalf("applying %T: %v", r, err)
	}
}

// start runs the node's BGP process in its namespace, with extra testnode
// flags.
func (f *fabric) start(name string, extra ...string) {
	f.t.Helper()
	f.startEnv(name, nil, extra...)
}

// startEnv is start with extra environment variables.
func (f *fabric) startEnv(name string, env []string, extra ...string) {
	f.t.Helper()
	bin := testnode(f.t)
	logf, err := os.OpenFile(filepath.Join(f.t.TempDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	args := append([]string{"netns", "exec", f.ns[name], bin, "-name", name, "-etcd", "http://" + etcdAddr, "-grpc", "127.0.0.1:50051"}, extra...)
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.procs[name] = cmd
	f.logs[name] = logf.Name()
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if f.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			f.t.Logf("--- %s log (tail):\n%s", name, b)
		}
	})
}

// log returns what the node's process logged so far.
func (f *fabric) log(name string) string {
	f.t.Helper()
	b, err := os.ReadFile(f.logs[name])
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// block claims a block for node and returns it.
func (f *fabric) block(node string) netip.Prefix {
	f.t.Helper()
	v4, _, err := f.alloc.AutoAssign(context.Background(), ipam.AutoAssignArgs{Num4: 1, Hostname: node, HandleID: "h-" + node})
	if err != nil || len(v4.IPs) == 0 {
		f.t.Fatalf("assigning an address to %s: %v", node, err)
	}
	return v4.IPs[0].Masked()
}

// pool creates the 10.244.0.0/16 pool (/26 blocks).
func (f *fabric) pool() {
	f.apply(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pods"}, Spec: v3.IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 26}})
}

// routes prints a namespace's routes.
func (f *fabric) routes(ns string, args ...string) string {
	return f.lab.Run(append([]string{"ip", "-n", ns, "route", "show"}, args...)...)
}

// proto is the nodes' route protocol as ip(8) takes it: routes are
// matched by number (iproute2 prints a name where a routing daemon on the
// host named it).
var proto = strconv.Itoa(kernel.DefaultProtocol)

// ours prints a namespace's routes of the nodes' protocol.
func (f *fabric) ours(ns string, args ...string) string {
	return f.lab.Run(append([]string{"ip", "-n", ns, "route", "show", "proto", proto}, args...)...)
}

// ours6 prints a namespace's IPv6 routes of the nodes' protocol.
func (f *fabric) ours6(ns string, args ...string) string {
	return f.lab.Run(append([]string{"ip", "-n", ns, "-6", "route", "show", "proto", proto}, args...)...)
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last state:\n%s", what, last)
}

// waitRoute waits until ns routes blk via gw with our protocol (or has no
// route to it when gw is "").
func (f *fabric) waitRoute(ns string, blk netip.Prefix, gw string) {
	f.t.Helper()
	eventually(f.t, 30*time.Second, fmt.Sprintf("%s: route %s via %q", ns, blk, gw), func() (bool, string) {
		if gw == "" {
			out := f.routes(ns, blk.String())
			return strings.TrimSpace(out) == "", out
		}
		out := f.ours(ns, blk.String())
		return strings.Contains(out, "via "+gw), out
	})
}

func asn(n uint32) *numorstring.ASNumber { a := numorstring.ASNumber(n); return &a }

// noDial drops the TCP connections a node opens towards BGP port 179, so
// its sessions come up only when the peer dials in: the tests of the
// accepting side use it.
func (f *fabric) noDial(name string) {
	f.t.Helper()
	f.lab.Run("ip", "netns", "exec", f.ns[name], "iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", "179", "--syn", "-j", "DROP")
}

// routes6 prints a namespace's IPv6 routes.
func (f *fabric) routes6(ns string, args ...string) string {
	return f.lab.Run(append([]string{"ip", "-n", ns, "-6", "route", "show"}, args...)...)
}

// block6 claims an IPv6 block for node and returns it.
func (f *fabric) block6(node string) netip.Prefix {
	f.t.Helper()
	_, v6, err := f.alloc.AutoAssign(context.Background(), ipam.AutoAssignArgs{Num6: 1, Hostname: node, HandleID: "h6-" + node})
	if err != nil || len(v6.IPs) == 0 {
		f.t.Fatalf("assigning an IPv6 address to %s: %v", node, err)
	}
	return v6.IPs[0].Masked()
}

// kill kills a node's BGP process with -9 (and whatever else runs in its
// namespace: `ip netns exec` may leave its child behind).
func (f *fabric) kill(name string) {
	f.t.Helper()
	if err := f.procs[name].Process.Signal(syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	_ = f.procs[name].Wait()
	if out, err := exec.Command("ip", "netns", "pids", f.ns[name]).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			if pid != strconv.Itoa(os.Getpid()) {
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
	}
}

// udpFlow is a UDP flow between addresses of two namespaces.
type udpFlow struct {
	name string
	*udpflow.Flow
}

// startUDP sends 100 datagrams a second from src (in srcNS) to dst:port
// (in dstNS) until Stop (or the test's end).
func (f *fabric) startUDP(srcNS string, src netip.Addr, dstNS string, dst netip.Addr, port int) udpFlow {
	f.t.Helper()
	var rc, sc *net.UDPConn
	if err := nstest.Do(dstNS, func() (err error) {
		rc, err = net.ListenUDP("udp", &net.UDPAddr{IP: dst.AsSlice(), Port: port})
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	if err := nstest.Do(srcNS, func() (err error) {
		sc, err = net.DialUDP("udp", &net.UDPAddr{IP: src.AsSlice()}, &net.UDPAddr{IP: dst.AsSlice(), Port: port})
		return err
	}); err != nil {
		rc.Close()
		f.t.Fatal(err)
	}
	fl := udpFlow{name: fmt.Sprintf("%s→%s", src, dst), Flow: udpflow.Start(rc, sc, 10*time.Millisecond, 16)}
	f.t.Cleanup(func() { fl.Stop() })
	return fl
}
