package felix

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/felix/rules"
	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/names"
)

const nodeName = "node-a"

// Addresses of the test: the node faces an "external" namespace on
// 198.18.0.0/24; pods are in the pool 10.65.0.0/16.
var (
	nodeAddr = netip.MustParseAddr("198.18.0.1")
	extAddr  = netip.MustParseAddr("198.18.0.2")
)

// extPorts and nodePorts are what the external namespace's and the
// node's servers listen on (TCP and UDP).
var extPorts, nodePorts = []int{8080}, []int{22, 8080}

// cluster is one node namespace programmed by a real felix (syncer, graph
// and dataplane) from an embedded etcd, an external namespace, and pods.
type cluster struct {
	t         *testing.T
	ctx       context.Context
	prefix    string
	store     datastore.Interface
	node      nstest.NS
	nodeRun   *nsexec.Runner
	nodeH     *netlink.Handle
	ext       nstest.NS
	extRun    *nsexec.Runner
	nodeSrv   *nstest.Server
	extSrv    *nstest.Server
	statusDir string
	pods      map[string]*pod
	save      string // iptables-save of the backend
	backend   string // FelixConfiguration iptablesBackend (NFT for BPF)
	// bpf: the eBPF dataplane (FelixConfiguration bpfEnabled) enforces
	// policy, not iptables.
	bpf bool
	// noTCX: felix is told the kernel has no TCX (bpfNoTCX).
	noTCX bool
	// noLoop: felix is told the kernel has no bpf_loop (bpfNoLoop).
	noLoop bool
	// endpoints are etcd's client URLs.
	endpoints []string
	cancel    context.CancelFunc
}

type pod struct {
	ns, name string
	ip       netip.Addr
	ip6      netip.Addr // invalid for an IPv4-only pod
	iface    string
	netns    nstest.NS
	run      *nsexec.Runner
	srv      *nstest.Server
	wep      *v3.WorkloadEndpoint // as written
}

// Dataplanes every policy test runs against: the iptables dataplane on
// each backend, and the eBPF one ("BPF": bpfEnabled, with the nft
// backend for what it keeps in iptables).
var dataplanes = []string{"NFT", "Legacy", "BPF"}

// bpfNoTCX is the eBPF dataplane with featureDetectOverride TCX=false, as
// on a kernel without TCX: every program attached as a cls_bpf filter.
const bpfNoTCX = "BPF-noTCX"

// bpfNoLoop is the eBPF dataplane with featureDetectOverride
// BPFLoop=false, as on a kernel before 5.17: the object without the
// policy engine, every policy stage compiled into instructions.
const bpfNoLoop = "BPF-noLoop"

// newCluster starts everything; backend is the FelixConfiguration
// iptablesBackend, or "BPF" for the eBPF dataplane.
func newCluster(t *testing.T, backend string) *cluster { return newClusterIPv6(t, backend, false) }

// newClusterIPv6 is newCluster with felix's ipv6Support set as given (the
// node namespace then forwards IPv6 too).
func newClusterIPv6(t *testing.T, backend string, ipv6 bool) *cluster {
	c := newClusterNoFelix(t, backend, ipv6)
	runFelix(t, c.ctx, c.cancel, c.felixConfigOf())
	return c
}

// featureOverrideEnv, when set, is given to felix as
// FELIX_FEATUREDETECTOVERRIDE: PALISADE_FEATURE_DETECT_OVERRIDE=TCX=false
// runs the eBPF suites on cls_bpf filters, as on a kernel without TCX.
const featureOverrideEnv = "PALISADE_FEATURE_DETECT_OVERRIDE"

// felixConfigOf is the felix.Config of the cluster's node.
func (c *cluster) felixConfigOf() Config {
	cfg := Config{NodeName: nodeName, Store: c.store, NetNS: c.node.Path(), StatusDir: c.statusDir,
		Log: log.WithField("test", c.t.Name())}
	var override []string
	if v := os.Getenv(featureOverrideEnv); v != "" {
		override = append(override, v)
	}
	if c.noTCX && !strings.Contains(os.Getenv(featureOverrideEnv), "TCX=false") {
		override = append(override, "TCX=false")
	}
	if c.noLoop && !strings.Contains(os.Getenv(featureOverrideEnv), "BPFLoop=false") {
		override = append(override, "BPFLoop=false")
	}
	if len(override) > 0 {
		cfg.Environ = []string{"FELIX_FEATUREDETECTOVERRIDE=" + strings.Join(override, ",")}
	}
	return cfg
}

// newClusterNoFelix is newClusterIPv6 without starting felix.
func newClusterNoFelix(t *testing.T, backend string, ipv6 bool) *cluster {
	nstest.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{t: t, ctx: ctx, prefix: nstest.Prefix(), pods: map[string]*pod{}, statusDir: t.TempDir(), save: "iptables-nft-save"}
	if backend == "Legacy" {
		c.save = "iptables-legacy-save"
	}
	if backend == "BPF" || backend == bpfNoTCX || backend == bpfNoLoop {
		c.noTCX = backend == bpfNoTCX || strings.Contains(os.Getenv(featureOverrideEnv), "TCX=false")
		c.noLoop = backend == bpfNoLoop || strings.Contains(os.Getenv(featureOverrideEnv), "BPFLoop=false")
		c.bpf, backend = true, "NFT"
	}
	c.backend = backend
	c.cancel = cancel
	c.endpoints = etcdtest.Start(t)
	c.store = etcdtest.NewStore(t, c.endpoints)
	c.node = nstest.New(t, c.prefix, "node")
	c.nodeRun = nstest.Runner(t, c.node)
	// The eBPF dataplane's pins outlive the namespace: removed after felix
	// stopped, before the namespace goes.
	t.Cleanup(func() {
		if err := palbpf.RemoveAll("", c.nodeRun); err != nil {
			t.Error(err)
		}
	})
	c.nodeH, _ = nstest.Handle(t, c.node)
	if err := nstest.Sysctl(c.nodeRun, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	if ipv6 {
		for _, sc := range []string{"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/accept_dad", "net/ipv6/conf/all/accept_dad"} {
			v := map[bool]string{true: "1", false: "0"}[strings.HasSuffix(sc, "forwarding")]
			if err := nstest.Sysctl(c.nodeRun, sc, v); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The external namespace, reachable through the node.
	c.ext = nstest.New(t, c.prefix, "ext")
	c.extRun = nstest.Runner(t, c.ext)
	c.node.MustRun(t, "ip", "link", "add", "eth-ext", "type", "veth", "peer", "name", "eth0", "netns", c.ext.Name)
	c.node.MustRun(t, "ip", "addr", "add", nodeAddr.String()+"/24", "dev", "eth-ext")
	c.node.MustRun(t, "ip", "link", "set", "eth-ext", "up")
	c.ext.MustRun(t, "ip", "addr", "add", extAddr.String()+"/24", "dev", "eth0")
	c.ext.MustRun(t, "ip", "link", "set", "eth0", "up")
	c.ext.MustRun(t, "ip", "route", "add", "10.65.0.0/16", "via", nodeAddr.String())
	var err error
	if c.extSrv, err = nstest.Serve(c.extRun, extPorts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.extSrv.Close)
	if c.nodeSrv, err = nstest.Serve(c.nodeRun, nodePorts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nodeSrv.Close)

	c.apply(fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: %s
  ipv6Support: %t
  bpfEnabled: %t
  iptablesRefreshInterval: 1s
  routeRefreshInterval: 2s
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16}
`, backend, ipv6, c.bpf))
	for _, ns := range []string{"ns-a", "ns-b"} {
		c.apply(fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.%[1]s}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
  labelsToApply: {pcns.team: %[1]s, pcns.projectcalico.org/name: %[1]s}
`, ns))
	}
	for _, sa := range []string{"ns-a.sa-x", "ns-b.sa-y"} {
		c.apply(fmt.Sprintf(`
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: ksa.%s}
spec:
  labelsToApply: {pcsa.role: %s}
`, sa, strings.Split(sa, ".")[1]))
	}

	return c
}

// runFelix runs felix until the test ends, then stops it (cancel) and
// checks it returned cleanly.
func runFelix(t *testing.T, ctx context.Context, cancel context.CancelFunc, cfg Config) {
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("felix.Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("felix did not stop")
		}
	})
}

// apply writes YAML resources.
func (c *cluster) apply(y string) []v3.Resource {
	c.t.Helper()
	rs, err := v3.Decode([]byte(y))
	if err != nil {
		c.t.Fatalf("decoding %s: %v", y, err)
	}
	for _, r := range rs {
		if _, err := c.store.Apply(c.ctx, r); err != nil {
			c.t.Fatalf("apply %s: %v", datastore.KeyOf(r), err)
		}
	}
	return rs
}

// remove deletes resources.
func (c *cluster) remove(rs []v3.Resource) {
	c.t.Helper()
	for _, r := range rs {
		if _, err := c.store.Delete(c.ctx, datastore.KeyOf(r), ""); err != nil {
			c.t.Fatalf("delete %s: %v", datastore.KeyOf(r), err)
		}
	}
}

// policyChains names the chains of the policies among rs.
func policyChains(rs []v3.Resource) []string {
	var out []string
	for _, r := range rs {
		var id calc.PolicyID
		switch p := r.(type) {
		case *v3.GlobalNetworkPolicy:
			id = calc.PolicyID{Tier: p.Spec.Tier, Name: p.Name}
		case *v3.NetworkPolicy:
			id = calc.PolicyID{Tier: p.Spec.Tier, Namespace: p.Namespace, Name: p.Name}
		default:
			continue
		}
		if id.Tier == "" {
			id.Tier = "default"
		}
		out = append(out, rules.PolicyChain(id, true), rules.PolicyChain(id, false))
	}
	return out
}

// waitPolicies is the barrier between a datastore write and the probes:
// it waits until every policy among rs has a chain in the kernel (present)
// or none has (removed). Felix writes a policy's chain in the same
// transaction as the endpoint chains that use it, after its IP sets.
func (c *cluster) waitPolicies(rs []v3.Resource, present bool) {
	c.t.Helper()
	if c.bpf {
		c.waitPrograms(rs, present)
		return
	}
	chains := policyChains(rs)
	if len(chains) == 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// iptables-legacy-save fails now and then when felix changes the
		// table during the dump: that is a reason to look again.
		out, err := c.node.Run(c.save, "-t", "filter")
		ok := err == nil
		for i := 0; i < len(chains); i += 2 {
			has := strings.Contains(out, ":"+chains[i]+" ") || strings.Contains(out, ":"+chains[i+1]+" ")
			if has != present {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("policy chains %v present=%v: not reached in the kernel", chains, present)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// policyKeys names the policies among rs as inspect.View.Policies does.
func policyKeys(rs []v3.Resource) []string {
	var out []string
	for _, r := range rs {
		var tier, name string
		switch p := r.(type) {
		case *v3.GlobalNetworkPolicy:
			tier, name = p.Spec.Tier, p.Name
		case *v3.NetworkPolicy:
			tier, name = p.Spec.Tier, p.Namespace+"/"+p.Name
		default:
			continue
		}
		if tier == "" {
			tier = "default"
		}
		out = append(out, tier+"/"+name)
	}
	return out
}

// bpfView opens the eBPF dataplane's maps of the node.
func (c *cluster) bpfView() (*inspect.View, error) { return inspect.Open("", c.nodeRun) }

// waitPrograms is waitPolicies for the eBPF dataplane: every policy among
// rs is in (present) or out of every interface's programs.
func (c *cluster) waitPrograms(rs []v3.Resource, present bool) {
	c.t.Helper()
	keys := policyKeys(rs)
	if len(keys) == 0 {
		return
	}
	c.waitFor(fmt.Sprintf("policies %v in programs: %v", keys, present), func() bool {
		v, err := c.bpfView()
		if err != nil {
			return false
		}
		defer v.Close()
		have, err := v.Policies()
		if err != nil {
			return false
		}
		for _, k := range keys {
			if have[k] != present {
				return false
			}
		}
		return true
	})
}

// addPod plumbs a pod like the CNI plugin, writes its WorkloadEndpoint
// and waits for felix to report it programmed.
func (c *cluster) addPod(ns, name, ip string, labels map[string]string, sa string) *pod {
	c.t.Helper()
	return c.addDualPod(ns, name, ip, "", labels, sa)
}

// addDualPod is addPod with an IPv6 address too (none when ip6 is "").
func (c *cluster) addDualPod(ns, name, ip, ip6 string, labels map[string]string, sa string) *pod {
	c.t.Helper()
	p := &pod{ns: ns, name: name, ip: netip.MustParseAddr(ip), iface: names.VethNameForWorkload(ns, name)}
	p.netns = nstest.New(c.t, c.prefix, "pod-"+name)
	p.run = nstest.Runner(c.t, p.netns)
	podH, podNS := nstest.Handle(c.t, p.netns)
	nets := []string{ip + "/32"}
	if ip6 != "" {
		p.ip6 = netip.MustParseAddr(ip6)
		nets = append(nets, ip6+"/128")
		if err := nstest.Sysctl(p.run, "net/ipv6/conf/default/accept_dad", "0"); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := nstest.Workload(c.nodeH, podH, podNS, p.iface, p.ip); err != nil {
		c.t.Fatalf("pod %s: %v", name, err)
	}
	if ip6 != "" {
		if err := nstest.WorkloadIPv6(podH, p.ip6); err != nil {
			c.t.Fatalf("pod %s: %v", name, err)
		}
	}
	var err error
	if p.srv, err = nstest.Serve(p.run, 8080, 8081, 9000, 9001); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.srv.Close)
	wep := &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(nodeName, "k8s", name, "eth0"), Namespace: ns, Labels: labels},
		Spec: v3.WorkloadEndpointSpec{
			Orchestrator: "k8s", Node: nodeName, Pod: name, Endpoint: "eth0", InterfaceName: p.iface,
			IPNetworks: nets, Profiles: []string{"kns." + ns, "ksa." + ns + "." + sa},
			ServiceAccountName: sa,
			Ports:              []v3.WorkloadEndpointPort{{Name: "http", Protocol: numorstring.ProtocolFromString("TCP"), Port: 8080}},
		},
	}
	if _, err := c.store.Apply(c.ctx, wep); err != nil {
		c.t.Fatal(err)
	}
	c.waitProgrammed(ns, wep.Name)
	p.wep = wep
	c.pods[name] = p
	return p
}

func (c *cluster) waitProgrammed(ns, wepName string) {
	c.t.Helper()
	path := filepath.Join(c.statusDir, dataplane.StatusFileName(ns, wepName))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("endpoint %s/%s not reported programmed (%s)", ns, wepName, path)
}

// probe is one packet test: from a pod (or "ext") to a pod (or "node",
// "ext") with a protocol, and whether it must get through.
type probe struct {
	from, to string
	proto    string // tcp, udp, icmp, sctp
	port     int
	allowed  bool
	// ipv6 sends between the pods' IPv6 addresses (TCP and UDP).
	ipv6 bool
	// seenFrom, when set, is the source address the receiver must see.
	seenFrom string
}

func (pr probe) String() string {
	verdict := "denied"
	if pr.allowed {
		verdict = "allowed"
	}
	family := ""
	if pr.ipv6 {
		family = " (IPv6)"
	}
	return fmt.Sprintf("%s→%s %s/%d%s %s", pr.from, pr.to, pr.proto, pr.port, family, verdict)
}

func (c *cluster) endpoint(name string, ipv6 bool) (*nsexec.Runner, netip.Addr, *nstest.Server) {
	if ipv6 {
		p := c.pods[name]
		if p == nil || !p.ip6.IsValid() {
			c.t.Fatalf("no IPv6 pod %s", name)
		}
		return p.run, p.ip6, p.srv
	}
	switch name {
	case "ext":
		return c.extRun, extAddr, c.extSrv
	case "node":
		return c.nodeRun, nodeAddr, c.nodeSrv
	}
	p := c.pods[name]
	if p == nil {
		c.t.Fatalf("no pod %s", name)
	}
	return p.run, p.ip, p.srv
}

// send runs a probe once; it returns whether traffic got through and the
// source the receiver saw.
func (c *cluster) send(pr probe) (bool, string) {
	run, src, _ := c.endpoint(pr.from, pr.ipv6)
	_, dst, srv := c.endpoint(pr.to, pr.ipv6)
	switch pr.proto {
	case "tcp":
		seen, err := nstest.TCP(run, dst, pr.port)
		return err == nil, seen
	case "udp":
		seen, err := nstest.UDP(run, dst, pr.port)
		return err == nil, seen
	case "icmp":
		return nstest.ICMP(run, dst, 8, 0) == nil, ""
	case "sctp":
		return nstest.SCTP(run, srv, src, dst, pr.port) == nil, ""
	}
	c.t.Fatalf("unknown protocol %s", pr.proto)
	return false, ""
}

// expect waits until every probe gives its expected verdict at once (felix
// programs asynchronously), failing with the probes that never did.
func (c *cluster) expect(probes ...probe) {
	c.t.Helper()
	// Converging may take a while on a busy machine (a BPF program load
	// under load took over a second); a wrong verdict still fails.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var bad []string
		for _, pr := range probes {
			ok, seen := c.send(pr)
			if ok != pr.allowed {
				bad = append(bad, pr.String()+": got the opposite")
				continue
			}
			if pr.seenFrom != "" {
				host, _, _ := net.SplitHostPort(seen)
				if host != pr.seenFrom {
					bad = append(bad, fmt.Sprintf("%s: receiver saw source %s, want %s", pr, host, pr.seenFrom))
				}
			}
		}
		if len(bad) == 0 {
			c.agree(probes...)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("probes failed:\n  %s", strings.Join(bad, "\n  "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
