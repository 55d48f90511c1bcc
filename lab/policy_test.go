package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/libcalico/names"
)

// policyConverge bounds how long a policy change may take to show in
// every probed cell.
const policyConverge = 10 * time.Second

// probeParallel bounds how many probes run at once.
const probeParallel = 256

// podSpec is a pod of the policy lab: where it runs and its labels.
type podSpec struct {
	namespace, name string
	node            int // index into the lab's nodes
	labels          labels
}

// policyPods are the pods of the policy tests. The e2e model's namespaces
// x, y, z hold pods a, b, c, rotated over the nodes so that every
// namespace has a pod on each node and both same-node and cross-node paths
// are probed. The seed's scenarios add namespace dev (media-api pods
// behind an API gateway tier), kube-system (a DNS server) and demo (a
// client whose egress is locked down). x/c also carries tier=apigateway,
// to show that a podSelector without namespaceSelector stays in its own
// namespace.
func policyPods(nodes int) []podSpec {
	var out []podSpec
	for i, ns := range []string{"x", "y", "z"} {
		for j, name := range []string{"a", "b", "c"} {
			l := labels{"pod": name}
			if ns == "x" && name == "c" {
				l["tier"] = "apigateway"
			}
			out = append(out, podSpec{ns, name, (i + j) % nodes, l})
		}
	}
	return append(out,
		podSpec{"dev", "media-a", 0, labels{"run": "media-api"}},
		podSpec{"dev", "media-b", 1 % nodes, labels{"run": "media-api"}},
		podSpec{"dev", "gateway", 2 % nodes, labels{"tier": "apigateway"}},
		podSpec{"dev", "batch", 1 % nodes, labels{"app": "batch"}},
		podSpec{"kube-system", "dns", 2 % nodes, labels{"k8s-app": "kube-dns"}},
		podSpec{"demo", "client", 0, labels{"app": "client"}},
	)
}

// policyNamespaces are the namespaces' labels (kube-system's as in the
// seed: name=kube-system).
func policyNamespaces() map[string]labels {
	return map[string]labels{
		"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"},
		"dev": {"ns": "dev"}, "kube-system": {"name": "kube-system"}, "demo": {"ns": "demo"},
	}
}

// probePorts are the ports every pod's server answers on.
var probePorts = []int{53, 80, 81}

// policyLab is the lab shared by the policy tests: its pods with their
// probe servers and the model's view of them.
type policyLab struct {
	l        *Lab
	pods     map[string]Pod
	model    map[string]modelPod
	servers  map[string]*probeServer
	nsLabels map[string]labels
	// seen is what the last successful converge observed.
	seen grid
}

// setupPolicyLab creates the pods concurrently, waits for felix to report
// each programmed, gives the WorkloadEndpoints their labels and the
// namespaces theirs, starts the probe servers, and waits until every pod
// reaches every other one with no policy.
func setupPolicyLab(t *testing.T, l *Lab) *policyLab {
	t.Helper()
	ctx := context.Background()
	began := time.Now()
	pl := &policyLab{l: l, pods: map[string]Pod{}, model: map[string]modelPod{}, servers: map[string]*probeServer{}, nsLabels: policyNamespaces()}
	nodes := l.Nodes()
	specs := policyPods(len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	for i, s := range specs {
		wg.Go(func() {
			p, err := l.AddPod(ctx, nodes[s.node].Name, s.namespace, s.name)
			if err == nil {
				err = waitEndpointStatus(ctx, l, p, 10*time.Second)
			}
			if err == nil {
				err = labelEndpoint(ctx, l, p, s.labels)
			}
			errs[i] = err
			mu.Lock()
			pl.pods[p.Key()] = p
			pl.model[p.Key()] = modelPod{namespace: s.namespace, name: s.name, labels: s.labels}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods created, programmed and labelled in %s", len(specs), time.Since(began).Round(time.Millisecond))
	if err := l.Apply(ctx, namespaceProfilesYAML(pl.nsLabels)); err != nil {
		t.Fatalf("namespace profiles: %v", err)
	}
	for key := range pl.pods {
		srv, err := serveProbes(l, key, probePorts)
		if err != nil {
			t.Fatal(err)
		}
		pl.servers[key] = srv
		t.Cleanup(srv.close)
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod routes in place after %s", time.Since(began).Round(time.Millisecond))
	return pl
}

// waitEndpointStatus waits for the file felix writes once a pod's endpoint
// is programmed, holding the pod's address.
func waitEndpointStatus(ctx context.Context, l *Lab, p Pod, timeout time.Duration) error {
	wep := names.WorkloadEndpointName(p.Node, names.OrchestratorKubernetes, p.Name, "eth0")
	path := filepath.Join(l.RunDir(p.Node), felix.EndpointStatusDir, dataplane.StatusFileName(p.Namespace, wep))
	deadline := time.Now().Add(timeout)
	for {
		var st dataplane.EndpointStatus
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err == nil && st.Status == "up" && slices.Contains(st.Addresses, p.IP.String()+"/32") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s: felix did not report endpoint %s programmed with %s in %s (%s: %v %q)", p.Key(), wep, p.IP, timeout, path, err, b)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// labelEndpoint gives a pod's WorkloadEndpoint labels with calicoctl, as
// the Kubernetes pod's labels would be.
func labelEndpoint(ctx context.Context, l *Lab, p Pod, ls labels) error {
	wep := names.WorkloadEndpointName(p.Node, names.OrchestratorKubernetes, p.Name, "eth0")
	for _, k := range slices.Sorted(maps.Keys(ls)) {
		if _, err := l.Calicoctl(ctx, p.Node, nil, "label", "workloadendpoint", wep, k+"="+ls[k], "-n", p.Namespace); err != nil {
			return fmt.Errorf("pod %s: %w", p.Key(), err)
		}
	}
	return nil
}

// grid is a reachability grid over the named pods.
func (pl *policyLab) grid(keys []string, protos []string, ports []int) grid {
	var pods []modelPod
	for _, k := range keys {
		pods = append(pods, pl.model[k])
	}
	return newGrid(pods, protos, ports)
}

// probeCells probes cells concurrently and records in g whether each got
// through.
func (pl *policyLab) probeCells(ctx context.Context, g grid, cells []cell) {
	sem := make(chan struct{}, probeParallel)
	res := make([]bool, len(cells))
	var wg sync.WaitGroup
	for i, k := range cells {
		src, dst := pl.pods[g.pods[k.src].key()], pl.pods[g.pods[k.dst].key()]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i] = probe(ctx, pl.l, src.Key(), src.IP, pl.servers[dst.Key()], dst.IP, k.proto, k.port) == nil
		})
	}
	wg.Wait()
	for i, k := range cells {
		g.ok[k] = res[i]
	}
}

// converge probes until every cell matches want in one full round, or
// policyConverge passes. After a full round, only the cells that differed
// are probed again, and a last full round confirms. The error shows the
// last difference and the cells that never once matched.
func (pl *policyLab) converge(ctx context.Context, want grid) (rounds int, took time.Duration, err error) {
	start := time.Now()
	got := newGrid(want.pods, want.protos, want.ports)
	all := want.cells()
	never := map[cell]bool{}
	for _, k := range all {
		never[k] = true
	}
	pending := all
	for {
		rounds++
		pl.probeCells(ctx, got, pending)
		// A probe can only be wrong one way: an allowed cell's answer
		// late on a loaded machine (a lost SYN waits a second for its
		// retransmission, past probeTimeout) reads as blocked; nothing
		// reads as allowed that is not. Such cells are probed once more
		// before the round counts (when all of them are, the next round
		// is that second probe).
		var late []cell
		for _, k := range pending {
			if want.ok[k] && !got.ok[k] {
				late = append(late, k)
			}
		}
		if len(late) > 0 && len(late) < len(pending) {
			pl.probeCells(ctx, got, late)
		}
		for _, k := range pending {
			if got.ok[k] == want.ok[k] {
				delete(never, k)
			}
		}
		bad := mismatches(want, got, pending)
		if len(bad) == 0 {
			if len(pending) == len(all) {
				pl.seen = got
				return rounds, time.Since(start), nil
			}
			pending = all
			continue
		}
		if time.Since(start) > policyConverge {
			var b strings.Builder
			fmt.Fprintf(&b, "%d of %d cells differ after %s (%d rounds):\n", len(bad), len(all), time.Since(start).Round(time.Millisecond), rounds)
			printDiff(&b, want, got)
			if len(never) > 0 {
				var ks []string
				for _, k := range all {
					if never[k] {
						ks = append(ks, want.name(k))
					}
				}
				fmt.Fprintf(&b, "never converged (%d): %s\n", len(ks), strings.Join(ks, ", "))
			}
			return rounds, time.Since(start), errors.New(b.String())
		}
		pending = bad
		// A cell still showing the old state answers at once: give
		// felix a moment rather than spinning.
		select {
		case <-ctx.Done():
			return rounds, time.Since(start), ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check is a cell of a case's intent stated by hand, checked against the
// model's expectation before anything is probed.
type check struct {
	src, dst string
	proto    string
	port     int
	allowed  bool
}

// policyCase is a set of policies applied together and the intent they
// express.
type policyCase struct {
	name     string
	policies []netpol
	checks   []check
}

// run applies the case's policies, waits until the probes show the
// model's matrix, then deletes them and waits until everything is allowed
// again.
func (pl *policyLab) run(t *testing.T, c policyCase, g grid) {
	t.Helper()
	ctx := context.Background()
	cl := cluster{nsLabels: pl.nsLabels, policies: c.policies}
	want := g.expect(cl)
	for _, ch := range c.checks {
		k, ok := want.find(ch.src, ch.dst, ch.proto, ch.port)
		if !ok {
			t.Fatalf("check %s → %s: not a cell of the grid", ch.src, ch.dst)
		}
		if want.ok[k] != ch.allowed {
			t.Fatalf("the model says %s allowed=%v, the case's intent says %v", want.name(k), want.ok[k], ch.allowed)
		}
	}
	allowed, blocked := want.counts()
	if allowed == 0 || blocked == 0 {
		t.Fatalf("case %s: %d cells allowed, %d blocked: a case must tell enforcement from its absence", c.name, allowed, blocked)
	}
	yaml := policiesYAML(c.policies)
	if err := pl.l.Apply(ctx, yaml); err != nil {
		t.Fatalf("applying:\n%s\n%v", yaml, err)
	}
	rounds, took, err := pl.converge(ctx, want)
	if err != nil {
		t.Errorf("policies:\n%s\n%v", yaml, err)
	} else {
		t.Logf("%d allowed / %d blocked cells as the model says after %s (%d probe rounds)", allowed, blocked, took.Round(time.Millisecond), rounds)
		xs := pl.agreeWithExplain(t, pl.seen)
		pl.checkDeciderCounters(t, pl.seen, xs)
	}
	if _, err := pl.l.Calicoctl(ctx, pl.l.Nodes()[0].Name, strings.NewReader(yaml), "delete", "-f", "-"); err != nil {
		t.Fatalf("deleting the policies: %v", err)
	}
	open := g.expect(cluster{nsLabels: pl.nsLabels})
	if _, took, err := pl.converge(ctx, open); err != nil {
		t.Fatalf("after deleting the policies, not everything is allowed again: %v", err)
	} else {
		t.Logf("policies deleted: all allowed again after %s", took.Round(time.Millisecond))
	}
}

// TestPolicy runs Calico policy end to end in one three-node lab: the
// seed's scenarios, then the Kubernetes network-policy e2e model's cases,
// each probed cell by cell with real TCP, UDP and SCTP packets against a
// matrix the model computes from the case's intent.
func TestPolicy(t *testing.T) {
	beside(t, &otherLane)
	testPolicyLab(t, Options{Nodes: 3})
}

// TestPolicyBPF is TestPolicy with felix's eBPF dataplane on every node
// (node 1's felix starts on iptables and moves over when the lab turns
// bpfEnabled on); then the inspection commands are run on a node.
func TestPolicyBPF(t *testing.T) {
	l := testPolicyLab(t, Options{Nodes: 3, BPF: true})
	checkBPFCommands(t, l)
}

// testPolicyLab brings a lab up with o, runs before (when given) on it,
// then runs the policy suite in it.
func testPolicyLab(t *testing.T, o Options, before ...func(*Lab)) *Lab {
	began := time.Now()
	l := newLab(t, o)
	t.Logf("lab up in %s", time.Since(began).Round(time.Millisecond))
	for _, f := range before {
		f(l)
	}
	pl := setupPolicyLab(t, l)
	all := slices.Sorted(maps.Keys(pl.pods))
	baseline := pl.grid(all, []string{protoTCP, protoUDP, protoSCTP}, probePorts).expect(cluster{nsLabels: pl.nsLabels})
	if rounds, took, err := pl.converge(context.Background(), baseline); err != nil {
		t.Fatalf("with no policy, pods do not all reach each other: %v", err)
	} else {
		t.Logf("no policy: all %d cells allowed after %s (%d rounds)", len(baseline.cells()), took.Round(time.Millisecond), rounds)
	}
	t.Run("seed", func(t *testing.T) { testSeedPolicies(t, pl) })
	t.Run("model", func(t *testing.T) { testModelPolicies(t, pl) })
	t.Run("dynamic", func(t *testing.T) { testDynamicPolicies(t, pl) })
	t.Logf("whole policy test: %s", time.Since(began).Round(time.Millisecond))
	return l
}

// testSeedPolicies: the seed's Kubernetes policies written as Calico
// NetworkPolicy: namespace dev isolated, then opened to its API gateway
// tier, and namespace demo's egress limited to DNS in kube-system.
func testSeedPolicies(t *testing.T, pl *policyLab) {
	g := func() grid {
		return pl.grid([]string{"dev/media-a", "dev/media-b", "dev/gateway", "dev/batch", "kube-system/dns", "demo/client", "x/a", "x/c"},
			[]string{protoTCP, protoUDP}, []int{53, 80})
	}
	defaultDeny := netpol{name: "default-deny", namespace: "dev", pods: labels{}, ingress: true}
	cases := []policyCase{{
		name:     "default-deny",
		policies: []netpol{defaultDeny},
		checks: []check{
			{"x/a", "dev/media-a", protoTCP, 80, false},
			{"dev/gateway", "dev/media-b", protoUDP, 53, false},
			{"dev/media-a", "x/a", protoTCP, 80, true},
			{"x/a", "kube-system/dns", protoUDP, 53, true},
			{"demo/client", "x/c", protoTCP, 80, true},
		},
	}, {
		name: "allow-from-apigateway",
		policies: []netpol{defaultDeny, {
			name: "allow-ingress-nginx", namespace: "dev", pods: labels{"run": "media-api"}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"tier": "apigateway"}}}}},
		}},
		checks: []check{
			{"dev/gateway", "dev/media-a", protoTCP, 80, true},
			{"dev/gateway", "dev/media-b", protoUDP, 53, true},
			{"dev/batch", "dev/media-a", protoTCP, 80, false},
			{"dev/media-b", "dev/gateway", protoTCP, 80, false},
			// tier=apigateway in another namespace is not the gateway.
			{"x/c", "dev/media-a", protoTCP, 80, false},
		},
	}, {
		name: "egress-only-dns",
		policies: []netpol{
			{name: "default-deny-egress", namespace: "demo", pods: labels{}, egress: true},
			{name: "allow-dns", namespace: "demo", pods: labels{}, egress: true, out: []rule{{
				peers: []peer{{namespaces: labels{"name": "kube-system"}}},
				ports: []port{{protoUDP, 53}},
			}}},
		},
		checks: []check{
			{"demo/client", "kube-system/dns", protoUDP, 53, true},
			{"demo/client", "kube-system/dns", protoTCP, 53, false},
			{"demo/client", "kube-system/dns", protoUDP, 80, false},
			{"demo/client", "x/a", protoUDP, 53, false},
			{"x/a", "demo/client", protoTCP, 80, true},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { pl.run(t, c, g()) })
	}
}

// testModelPolicies: the Kubernetes network-policy e2e model (namespaces
// x, y, z; pods a, b, c; ports 80 and 81; TCP, UDP and SCTP) with its
// classic cases written as Calico NetworkPolicy.
func testModelPolicies(t *testing.T, pl *policyLab) {
	var keys []string
	for _, ns := range []string{"x", "y", "z"} {
		for _, p := range []string{"a", "b", "c"} {
			keys = append(keys, ns+"/"+p)
		}
	}
	g := func() grid { return pl.grid(keys, []string{protoTCP, protoUDP, protoSCTP}, []int{80, 81}) }
	denyX := netpol{name: "deny-all", namespace: "x", pods: labels{}, ingress: true}
	cases := []policyCase{{
		name:     "deny-all-ingress-x",
		policies: []netpol{denyX},
		checks:   []check{{"y/a", "x/b", protoSCTP, 81, false}, {"x/a", "y/b", protoTCP, 80, true}},
	}, {
		name: "allow-same-namespace-x",
		policies: []netpol{{name: "same-ns", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{}}}}}}},
		checks: []check{{"x/a", "x/b", protoUDP, 81, true}, {"z/a", "x/b", protoTCP, 80, false}},
	}, {
		name: "allow-namespace-y-into-x",
		policies: []netpol{{name: "from-y", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{namespaces: labels{"ns": "y"}}}}}}},
		checks: []check{{"y/c", "x/a", protoSCTP, 80, true}, {"x/b", "x/a", protoTCP, 80, false}},
	}, {
		name: "allow-pod-b-any-namespace-into-x-a",
		policies: []netpol{{name: "from-b", namespace: "x", pods: labels{"pod": "a"}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"pod": "b"}, namespaces: labels{}}}}}}},
		checks: []check{{"z/b", "x/a", protoTCP, 81, true}, {"z/c", "x/a", protoTCP, 81, false}, {"z/c", "x/b", protoTCP, 81, true}},
	}, {
		name: "allow-tcp-81-only-into-x",
		policies: []netpol{{name: "tcp-81", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{ports: []port{{protoTCP, 81}}}}}},
		checks: []check{{"y/a", "x/a", protoTCP, 81, true}, {"y/a", "x/a", protoTCP, 80, false}, {"y/a", "x/a", protoUDP, 81, false}},
	}, {
		name: "sctp-80-from-z-into-x",
		policies: []netpol{{name: "sctp-z", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{namespaces: labels{"ns": "z"}}}, ports: []port{{protoSCTP, 80}}}}}},
		checks: []check{{"z/a", "x/c", protoSCTP, 80, true}, {"z/a", "x/c", protoSCTP, 81, false}, {"z/a", "x/c", protoTCP, 80, false}},
	}, {
		name:     "deny-all-egress-y",
		policies: []netpol{{name: "deny-egress", namespace: "y", pods: labels{}, egress: true}},
		checks:   []check{{"y/a", "y/b", protoTCP, 80, false}, {"x/a", "y/b", protoTCP, 80, true}},
	}, {
		name: "egress-x-a-to-y-b-udp-80",
		policies: []netpol{{name: "a-to-yb", namespace: "x", pods: labels{"pod": "a"}, egress: true,
			out: []rule{{peers: []peer{{pods: labels{"pod": "b"}, namespaces: labels{"ns": "y"}}}, ports: []port{{protoUDP, 80}}}}}},
		checks: []check{{"x/a", "y/b", protoUDP, 80, true}, {"x/a", "x/b", protoUDP, 80, false}, {"x/b", "y/a", protoTCP, 81, true}},
	}, {
		name: "allow-all-overrides-deny-x",
		policies: []netpol{denyX, {name: "allow-all", namespace: "x", pods: labels{"pod": "a"}, ingress: true,
			in: []rule{{}}}},
		checks: []check{{"z/c", "x/a", protoSCTP, 81, true}, {"z/c", "x/b", protoSCTP, 81, false}},
	}, {
		// Calico's own semantics: order before name, a Deny rule, a
		// policy whose rules do not match handing over to the next one in
		// the tier, and a GlobalNetworkPolicy across namespaces.
		name: "calico-order-deny-global",
		policies: []netpol{
			{name: "deny-y-tcp-80", global: true, order: ptr(10.0), pods: labels{}, ingress: true, in: []rule{
				{peers: []peer{{namespaces: labels{"ns": "y"}}}, ports: []port{{protoTCP, 80}}, deny: true}, {}}},
			{name: "a-from-y-tcp", namespace: "x", order: ptr(5.0), pods: labels{"pod": "a"}, ingress: true,
				in: []rule{{peers: []peer{{namespaces: labels{"ns": "y"}}}, ports: []port{{protoTCP, 0}}}}},
		},
		checks: []check{{"y/b", "x/a", protoTCP, 80, true}, {"y/b", "x/b", protoTCP, 80, false}, {"y/b", "z/c", protoTCP, 80, false},
			{"z/b", "x/a", protoTCP, 80, true}, {"y/b", "x/b", protoTCP, 81, true}, {"y/b", "x/b", protoUDP, 80, true}},
	}, {
		name: "calico-egress-order-over-name",
		policies: []netpol{
			{name: "a-allow-all", namespace: "z", order: ptr(2.0), pods: labels{}, egress: true, out: []rule{{}}},
			{name: "b-deny-udp-to-x", namespace: "z", order: ptr(1.0), pods: labels{}, egress: true,
				out: []rule{{peers: []peer{{namespaces: labels{"ns": "x"}}}, ports: []port{{protoUDP, 0}}, deny: true}}},
			{name: "a-deny-unordered", namespace: "z", pods: labels{"pod": "c"}, egress: true, out: []rule{{deny: true}}},
		},
		checks: []check{{"z/a", "x/a", protoUDP, 81, false}, {"z/a", "x/a", protoTCP, 81, true}, {"z/c", "y/a", protoSCTP, 80, true}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { pl.run(t, c, g()) })
	}
}

func ptr[T any](v T) *T { return &v }

// expectNow waits until the probes show what the model says of the pods'
// and namespaces' current labels under policies.
func (pl *policyLab) expectNow(t *testing.T, what string, policies []netpol, g func() grid) {
	t.Helper()
	want := g().expect(cluster{nsLabels: pl.nsLabels, policies: policies})
	if _, took, err := pl.converge(context.Background(), want); err != nil {
		t.Fatalf("%s: %v", what, err)
	} else {
		t.Logf("%s: as the model says after %s", what, took.Round(time.Millisecond))
		pl.agreeWithExplain(t, pl.seen)
	}
}

// relabel sets one label of a pod's WorkloadEndpoint and of the model's pod.
func (pl *policyLab) relabel(t *testing.T, key, k, v string) {
	t.Helper()
	p := pl.pods[key]
	wep := names.WorkloadEndpointName(p.Node, names.OrchestratorKubernetes, p.Name, "eth0")
	if _, err := pl.l.Calicoctl(context.Background(), p.Node, nil, "label", "workloadendpoint", wep, k+"="+v, "--overwrite", "-n", p.Namespace); err != nil {
		t.Fatal(err)
	}
	m := pl.model[key]
	m.labels = maps.Clone(m.labels)
	m.labels[k] = v
	pl.model[key] = m
}

// relabelNamespace replaces a namespace's labels (its kns. Profile).
func (pl *policyLab) relabelNamespace(t *testing.T, ns string, ls labels) {
	t.Helper()
	pl.nsLabels[ns] = ls
	if err := pl.l.Apply(context.Background(), namespaceProfilesYAML(map[string]labels{ns: ls})); err != nil {
		t.Fatal(err)
	}
}

// testDynamicPolicies: policy follows the cluster while it stays in
// force — a pod's labels change, a namespace's labels change, a pod is
// born into an isolated namespace.
func testDynamicPolicies(t *testing.T, pl *policyLab) {
	ctx := context.Background()
	keys := []string{"x/a", "x/b", "y/a", "y/b", "z/a", "z/c"}
	g := func() grid { return pl.grid(keys, []string{protoTCP, protoUDP}, []int{80}) }
	withPolicies := func(t *testing.T, ps []netpol, steps func(t *testing.T)) {
		yaml := policiesYAML(ps)
		if err := pl.l.Apply(ctx, yaml); err != nil {
			t.Fatalf("applying:\n%s\n%v", yaml, err)
		}
		pl.expectNow(t, "applied", ps, g)
		steps(t)
		if _, err := pl.l.Calicoctl(ctx, pl.l.Nodes()[0].Name, strings.NewReader(yaml), "delete", "-f", "-"); err != nil {
			t.Fatalf("deleting the policies: %v", err)
		}
		pl.expectNow(t, "policies deleted", nil, g)
	}
	t.Run("pod-labels", func(t *testing.T) {
		ps := []netpol{{name: "from-b", namespace: "x", pods: labels{"pod": "a"}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"pod": "b"}, namespaces: labels{}}}}}}}
		withPolicies(t, ps, func(t *testing.T) {
			pl.relabel(t, "z/c", "pod", "b")
			pl.expectNow(t, "z/c relabelled pod=b: it reaches x/a", ps, g)
			pl.relabel(t, "x/a", "pod", "a2")
			pl.expectNow(t, "x/a relabelled pod=a2: the policy no longer selects it", ps, g)
			pl.relabel(t, "x/a", "pod", "a")
			pl.relabel(t, "z/c", "pod", "c")
			pl.expectNow(t, "labels restored", ps, g)
		})
	})
	t.Run("namespace-labels", func(t *testing.T) {
		ps := []netpol{{name: "from-y", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{namespaces: labels{"ns": "y"}}}}}}}
		withPolicies(t, ps, func(t *testing.T) {
			pl.relabelNamespace(t, "z", labels{"ns": "y"})
			pl.expectNow(t, "namespace z labelled ns=y: its pods reach x", ps, g)
			pl.relabelNamespace(t, "z", labels{"ns": "z"})
			pl.expectNow(t, "namespace z labels restored", ps, g)
		})
	})
	t.Run("new-pod-isolated-from-first-packet", func(t *testing.T) {
		ps := []netpol{{name: "same-ns", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{}}}}}}}
		withPolicies(t, ps, func(t *testing.T) { pl.newPodUnderPolicy(t, ps, keys) })
	})
}

// newPodUnderPolicy adds pod x/d while x admits only its own namespace:
// from the moment CNI ADD returns, through felix reporting the endpoint
// programmed and a second beyond, y/a never reaches it; then x/a does.
func (pl *policyLab) newPodUnderPolicy(t *testing.T, ps []netpol, keys []string) {
	ctx := context.Background()
	node := pl.l.Nodes()[len(pl.l.Nodes())-1].Name
	p, err := pl.l.AddPod(ctx, node, "x", "d")
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	defer func() {
		delete(pl.pods, p.Key())
		delete(pl.model, p.Key())
		if err := pl.l.DelPod(ctx, p.Key()); err != nil {
			t.Error(err)
		}
	}()
	srv, err := serveProbes(pl.l, p.Key(), []int{80})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	pl.pods[p.Key()], pl.servers[p.Key()] = p, srv
	pl.model[p.Key()] = modelPod{namespace: "x", name: "d", labels: labels{}}
	defer delete(pl.servers, p.Key())
	from := pl.pods["y/a"]
	type seen struct {
		at  time.Time
		err error
	}
	status := make(chan seen, 1)
	go func() {
		err := waitEndpointStatus(ctx, pl.l, p, 10*time.Second)
		status <- seen{time.Now(), err}
	}()
	var programmed time.Time
	probes := 0
	for programmed.IsZero() || time.Since(programmed) < time.Second {
		select {
		case st := <-status:
			if st.err != nil {
				t.Fatal(st.err)
			}
			programmed = st.at
		default:
		}
		for _, proto := range []string{protoTCP, protoUDP} {
			probes++
			if err := probe(ctx, pl.l, from.Key(), from.IP, srv, p.IP, proto, 80); err == nil {
				t.Errorf("y/a reached the new pod x/d over %s/80 %s after CNI ADD (programmed: %v)", proto, time.Since(added).Round(time.Millisecond), !programmed.IsZero())
			}
		}
	}
	t.Logf("x/d programmed %s after CNI ADD; %d probes from y/a before and after, none got through", programmed.Sub(added).Round(time.Millisecond), probes)
	pl.expectNow(t, "new pod x/d", ps, func() grid {
		return pl.grid(append(slices.Clone(keys), p.Key()), []string{protoTCP, protoUDP}, []int{80})
	})
}
