package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// kubeProbeTimeout is how long a probe of the Kubernetes tests waits
// before calling its traffic dropped.
const kubeProbeTimeout = 400 * time.Millisecond

// kubeServe are the ports every pod of the e2e model serves.
var kubeServe = []ServePort{{80, ProtoTCP}, {81, ProtoTCP}, {80, ProtoUDP}, {81, ProtoUDP}, {80, ProtoSCTP}, {81, ProtoSCTP}}

// kubeLab is the upstream network-policy e2e model in a lab with
// Kubernetes: namespaces x, y, z each with pods a, b, c (label pod=<name>)
// spread over three nodes, every pod serving TCP, UDP and SCTP on 80 and
// 81 under the e2e's port names.
type kubeLab struct {
	t    *testing.T
	l    *Lab
	kc   kubernetes.Interface
	mu   sync.Mutex
	pods map[string]kpod
	ns   map[string]labels
}

func newKubeLab(t *testing.T) *kubeLab {
	t.Helper()
	requireLab(t)
	o := Options{Nodes: 3, Kubernetes: true, KubeBinDir: kubetest.Bin(t)}
	began := time.Now()
	l := newLab(t, o)
	t.Logf("lab with Kubernetes up in %s", time.Since(began).Round(time.Millisecond))
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	kl := &kubeLab{t: t, l: l, kc: kc, pods: map[string]kpod{}, ns: map[string]labels{}}
	ctx := context.Background()
	for _, ns := range []string{"x", "y", "z"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"ns": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kl.ns[ns] = labels{"ns": ns, "kubernetes.io/metadata.name": ns}
	}
	nodes := l.Nodes()
	var wg sync.WaitGroup
	errs := make(chan error, 9)
	for i, ns := range []string{"x", "y", "z"} {
		for j, name := range []string{"a", "b", "c"} {
			wg.Go(func() {
				if err := kl.addPod(ctx, nodes[(i+j)%len(nodes)].Name, ns, name, labels{"pod": name}); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("9 pods serving after %s", time.Since(began).Round(time.Millisecond))
	return kl
}

// addPod creates a served pod and records it in the model.
func (kl *kubeLab) addPod(ctx context.Context, node, ns, name string, ls labels) error {
	p, err := kl.l.AddPodWith(ctx, node, ns, name, PodOptions{Labels: ls, Serve: kubeServe})
	if err != nil {
		return err
	}
	ports := map[string]kport{}
	for _, s := range kubeServe {
		ports[s.Name()] = kport{proto: s.Protocol, num: s.Port}
	}
	kl.mu.Lock()
	kl.pods[p.Key()] = kpod{namespace: ns, name: name, labels: ls, ip: p.IP, ports: ports}
	kl.mu.Unlock()
	return nil
}

// kgrid is the reachability over the model's pods.
func (kl *kubeLab) grid(protos []string) grid {
	var pods []modelPod
	for _, ns := range []string{"x", "y", "z"} {
		for _, n := range []string{"a", "b", "c"} {
			pods = append(pods, modelPod{namespace: ns, name: n})
		}
	}
	return newGrid(pods, protos, []int{80, 81})
}

// expect fills g from the Kubernetes model.
func (kl *kubeLab) expect(g grid, pols []knp) grid {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	c := kcluster{nsLabels: kl.ns, policies: pols}
	for _, k := range g.cells() {
		g.ok[k] = c.allowed(kl.pods[g.pods[k.src].key()], kl.pods[g.pods[k.dst].key()], k.proto, k.port)
	}
	return g
}

// probeCells probes cells concurrently into g.
func (kl *kubeLab) probeCells(ctx context.Context, g grid, cells []cell) {
	sem := make(chan struct{}, probeParallel)
	res := make([]bool, len(cells))
	var wg sync.WaitGroup
	kl.mu.Lock()
	pods := kl.pods
	kl.mu.Unlock()
	for i, k := range cells {
		src, dst := g.pods[k.src].key(), pods[g.pods[k.dst].key()]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i] = kl.l.Probe(ctx, src, dst.ip, k.port, k.proto, kubeProbeTimeout) == nil
		})
	}
	wg.Wait()
	for i, k := range cells {
		g.ok[k] = res[i]
	}
}

// converge probes until every cell matches want in one full round (see
// policyLab.converge).
func (kl *kubeLab) converge(ctx context.Context, want grid) (time.Duration, error) {
	start := time.Now()
	got := newGrid(want.pods, want.protos, want.ports)
	all := want.cells()
	pending := all
	for {
		kl.probeCells(ctx, got, pending)
		bad := mismatches(want, got, pending)
		if len(bad) == 0 {
			if len(pending) == len(all) {
				return time.Since(start), nil
			}
			pending = all
			continue
		}
		if time.Since(start) > policyConverge {
			var b strings.Builder
			fmt.Fprintf(&b, "%d of %d cells differ after %s:\n", len(bad), len(all), time.Since(start).Round(time.Millisecond))
			printDiff(&b, want, got)
			return time.Since(start), errors.New(b.String())
		}
		pending = bad
		time.Sleep(50 * time.Millisecond)
	}
}

// kcase is a set of NetworkPolicies applied together, the protocols
// probed, and cells stated by hand that the model must agree with.
type kcase struct {
	name     string
	policies []knp
	protos   []string
	checks   []check
}

// apply makes the case's policies the only ones (deleting the previous
// case's with kubectl, applying this one's) and waits for the model's
// matrix.
func (kl *kubeLab) apply(t *testing.T, prev, c kcase) {
	t.Helper()
	ctx := context.Background()
	protos := c.protos
	if protos == nil {
		protos = []string{protoTCP}
	}
	want := kl.expect(kl.grid(protos), c.policies)
	for _, ch := range c.checks {
		k, ok := want.find(ch.src, ch.dst, ch.proto, ch.port)
		if !ok {
			t.Fatalf("check %s → %s: not a cell of the grid", ch.src, ch.dst)
		}
		if want.ok[k] != ch.allowed {
			t.Fatalf("the model says %s allowed=%v, the case says %v", want.name(k), want.ok[k], ch.allowed)
		}
	}
	if allowed, blocked := want.counts(); blocked == 0 && len(c.policies) > 0 || allowed == 0 {
		t.Fatalf("case %s: %d allowed, %d blocked: a case must tell enforcement from its absence", c.name, allowed, blocked)
	}
	if len(prev.policies) > 0 {
		if _, err := kl.l.KubectlOutput(ctx, knpYAML(prev.policies), "delete", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	yaml := knpYAML(c.policies)
	if len(c.policies) > 0 {
		if _, err := kl.l.KubectlOutput(ctx, yaml, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply:\n%s\n%v", yaml, err)
		}
	}
	took, err := kl.converge(ctx, want)
	if err != nil {
		t.Fatalf("policies:\n%s\n%v", yaml, err)
	}
	allowed, blocked := want.counts()
	t.Logf("%d allowed / %d blocked as the model says after %s", allowed, blocked, took.Round(time.Millisecond))
	// The probes saw want: policy explain must predict every cell of it.
	agreeWithExplain(t, kl.l, want, func(m modelPod) netip.Addr { return kl.pods[m.key()].ip })
}

// TestKubernetesNetworkPolicy runs the upstream network-policy e2e model
// in a lab with Kubernetes: each case's NetworkPolicies are applied with
// kubectl, turned into Calico policies by calico-kube-controllers and
// enforced by felix, and every cell of the matrix is probed with real
// packets against the model's answer.
func TestKubernetesNetworkPolicy(t *testing.T) {
	beside(t, &otherLane)
	began := time.Now()
	kl := newKubeLab(t)
	all := sel(nil)
	podA, podB, podC := sel(labels{"pod": "a"}), sel(labels{"pod": "b"}), sel(labels{"pod": "c"})
	nsY := sel(labels{"ns": "y"})
	everything := []string{protoTCP, protoUDP, protoSCTP}
	ip := func(key string) string { return kl.pods[key].ip.String() + "/32" }
	cases := []kcase{
		{name: "no policy: everything reaches everything", protos: everything},
		{name: "default-deny-ingress", protos: everything,
			policies: []knp{{name: "deny-ingress", namespace: "x", pods: all, types: []string{"Ingress"}}},
			checks:   []check{{"y/a", "x/b", protoSCTP, 81, false}, {"x/a", "x/b", protoUDP, 80, false}, {"x/a", "y/b", protoTCP, 80, true}}},
		{name: "default-deny-all",
			policies: []knp{{name: "deny-all", namespace: "x", pods: all, types: []string{"Ingress", "Egress"}}},
			checks:   []check{{"x/a", "y/b", protoTCP, 80, false}, {"y/a", "x/b", protoTCP, 80, false}, {"y/a", "z/b", protoTCP, 80, true}}},
		{name: "allow from pods within the namespace by PodSelector",
			policies: []knp{{name: "allow-b", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{pods: podB}}}}}},
			checks:   []check{{"x/b", "x/a", protoTCP, 80, true}, {"y/b", "x/a", protoTCP, 80, false}, {"x/c", "x/a", protoTCP, 81, false}}},
		{name: "allow from all namespaces (on port 80)",
			policies: []knp{{name: "any-ns", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: all}}, ports: []kport{{num: 80}}}}}},
			checks:   []check{{"z/c", "x/a", protoTCP, 80, true}, {"z/c", "x/a", protoTCP, 81, false}}},
		{name: "allow only from another namespace by NamespaceSelector",
			policies: []knp{{name: "from-y", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}}}}},
			checks:   []check{{"y/c", "x/a", protoTCP, 80, true}, {"x/b", "x/a", protoTCP, 80, false}, {"z/b", "x/a", protoTCP, 80, false}}},
		{name: "PodSelector with MatchExpressions",
			policies: []knp{{name: "expr", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{pods: sel(nil, kexpr{"pod", "In", []string{"b"}})}}}}}},
			checks:   []check{{"x/b", "x/a", protoTCP, 80, true}, {"x/c", "x/a", protoTCP, 80, false}}},
		{name: "NamespaceSelector with MatchExpressions on the default name label",
			policies: []knp{{name: "expr-ns", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: sel(nil,
				kexpr{"kubernetes.io/metadata.name", "NotIn", []string{"x", "z"}})}}}}}},
			checks: []check{{"y/a", "x/a", protoTCP, 81, true}, {"z/a", "x/a", protoTCP, 81, false}}},
		{name: "PodSelector or NamespaceSelector",
			policies: []knp{{name: "or", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}, {pods: podB}}}}}},
			checks:   []check{{"x/b", "x/a", protoTCP, 80, true}, {"y/c", "x/a", protoTCP, 80, true}, {"z/b", "x/a", protoTCP, 80, false}}},
		{name: "PodSelector and NamespaceSelector",
			policies: []knp{{name: "and", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY, pods: podB}}}}}},
			checks:   []check{{"y/b", "x/a", protoTCP, 80, true}, {"y/c", "x/a", protoTCP, 80, false}, {"x/b", "x/a", protoTCP, 80, false}}},
		{name: "multiple PodSelectors and NamespaceSelectors",
			policies: []knp{{name: "multi", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{
				namespaces: sel(nil, kexpr{"ns", "NotIn", []string{"x"}}), pods: sel(nil, kexpr{"pod", "In", []string{"b", "c"}})}}}}}},
			checks: []check{{"z/c", "x/a", protoTCP, 80, true}, {"z/a", "x/a", protoTCP, 80, false}, {"x/b", "x/a", protoTCP, 80, false}}},
		{name: "ports: only 81",
			policies: []knp{{name: "p81", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{proto: protoTCP, num: 81}}}}}},
			checks:   []check{{"y/a", "x/a", protoTCP, 81, true}, {"y/a", "x/a", protoTCP, 80, false}}},
		{name: "multiple stacked policies with overlapping podSelectors",
			policies: []knp{
				{name: "p80", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{num: 80}}}}},
				{name: "p81", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{num: 81}}}}}},
			checks: []check{{"y/a", "x/a", protoTCP, 80, true}, {"y/a", "x/a", protoTCP, 81, true}, {"z/a", "x/a", protoTCP, 81, false}}},
		{name: "allow ingress on one named port",
			policies: []knp{{name: "named", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{name: "serve-81-tcp"}}}}}},
			checks:   []check{{"y/a", "x/b", protoTCP, 81, true}, {"y/a", "x/b", protoTCP, 80, false}}},
		{name: "allow ingress from a namespace on one named port",
			policies: []knp{{name: "named-ns", namespace: "x", pods: all, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{name: "serve-80-tcp"}}}}}},
			checks:   []check{{"y/a", "x/b", protoTCP, 80, true}, {"z/a", "x/b", protoTCP, 80, false}, {"y/a", "x/b", protoTCP, 81, false}}},
		{name: "allow egress on one named port (UDP)", protos: []string{protoTCP, protoUDP},
			policies: []knp{{name: "named-egress", namespace: "x", pods: podA, types: []string{"Egress"}, egress: []krule{{ports: []kport{{proto: protoUDP, name: "serve-80-udp"}}}}}},
			checks:   []check{{"x/a", "y/b", protoUDP, 80, true}, {"x/a", "y/b", protoUDP, 81, false}, {"x/a", "y/b", protoTCP, 80, false}}},
		{name: "endPort range",
			policies: []knp{{name: "range", namespace: "x", pods: podA, ingress: []krule{{ports: []kport{{proto: protoTCP, num: 79, end: 80}}}}}},
			checks:   []check{{"y/a", "x/a", protoTCP, 80, true}, {"y/a", "x/a", protoTCP, 81, false}}},
		{name: "deny egress of pods by PodSelector",
			policies: []knp{{name: "deny-egress-a", namespace: "x", pods: podA, types: []string{"Egress"}}},
			checks:   []check{{"x/a", "y/b", protoTCP, 80, false}, {"x/b", "y/b", protoTCP, 80, true}}},
		{name: "Ingress and Egress together",
			policies: []knp{{name: "both", namespace: "x", pods: podA, types: []string{"Ingress", "Egress"},
				ingress: []krule{{peers: []kpeer{{pods: podB}}}}, egress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{num: 80}}}}}},
			checks: []check{{"x/b", "x/a", protoTCP, 80, true}, {"x/a", "y/c", protoTCP, 80, true}, {"x/a", "y/c", protoTCP, 81, false}, {"x/a", "x/b", protoTCP, 80, false}}},
		{name: "egress denied on the client even when the server allows it",
			policies: []knp{
				{name: "client-deny", namespace: "x", pods: podA, types: []string{"Egress"}},
				{name: "server-allow", namespace: "y", pods: podB, ingress: []krule{{peers: []kpeer{{namespaces: sel(labels{"ns": "x"}), pods: podA}}}}}},
			checks: []check{{"x/a", "y/b", protoTCP, 80, false}, {"x/b", "y/b", protoTCP, 80, false}, {"y/a", "y/c", protoTCP, 80, true}}},
		{name: "egress to a server in another namespace by PodSelector and NamespaceSelector",
			policies: []knp{{name: "egress-yb", namespace: "x", pods: podA, types: []string{"Egress"},
				egress: []krule{{peers: []kpeer{{namespaces: nsY, pods: podB}}}}}},
			checks: []check{{"x/a", "y/b", protoTCP, 81, true}, {"x/a", "y/c", protoTCP, 81, false}}},
		{name: "ingress allow-all takes precedence over a narrower policy",
			policies: []knp{
				{name: "narrow", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{pods: podB}}}}},
				{name: "allow-all", namespace: "x", pods: all, ingress: []krule{{}}},
				{name: "deny-y", namespace: "y", pods: all, types: []string{"Ingress"}}},
			checks: []check{{"z/c", "x/a", protoTCP, 80, true}, {"z/c", "y/a", protoTCP, 80, false}}},
		{name: "egress to a CIDR block", protos: everything,
			policies: []knp{{name: "cidr", namespace: "x", pods: podA, types: []string{"Egress"},
				egress: []krule{{peers: []kpeer{{cidr: ip("y/b")}}}}}},
			checks: []check{{"x/a", "y/b", protoSCTP, 80, true}, {"x/a", "y/c", protoUDP, 80, false}}},
		{name: "egress to a CIDR block with except",
			policies: []knp{{name: "cidr-except", namespace: "x", pods: podA, types: []string{"Egress"},
				egress: []krule{{peers: []kpeer{{cidr: "10.244.0.0/16", except: []string{ip("y/b")}}}}}}},
			checks: []check{{"x/a", "y/b", protoTCP, 80, false}, {"x/a", "y/c", protoTCP, 80, true}}},
		{name: "an IP in both CIDR and except is allowed by another peer",
			policies: []knp{{name: "cidr-except-2", namespace: "x", pods: podA, types: []string{"Egress"},
				egress: []krule{{peers: []kpeer{{cidr: "10.244.0.0/16", except: []string{ip("y/b")}}, {cidr: ip("y/b")}}, ports: []kport{{num: 80}}}}}},
			checks: []check{{"x/a", "y/b", protoTCP, 80, true}, {"x/a", "y/b", protoTCP, 81, false}}},
		{name: "ingress and egress controlled independently",
			policies: []knp{
				{name: "in-a", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{pods: podB}}}}},
				{name: "out-a", namespace: "x", pods: podA, types: []string{"Egress"}, egress: []krule{{peers: []kpeer{{pods: podC}}}}}},
			checks: []check{{"x/b", "x/a", protoTCP, 80, true}, {"x/a", "x/b", protoTCP, 80, false}, {"x/a", "x/c", protoTCP, 80, true}}},
		{name: "SCTP is not TCP", protos: everything,
			policies: []knp{{name: "sctp-only", namespace: "x", pods: podA, ingress: []krule{{ports: []kport{{proto: protoSCTP, num: 80}}}}}},
			checks:   []check{{"y/a", "x/a", protoSCTP, 80, true}, {"y/a", "x/a", protoTCP, 80, false}, {"y/a", "x/a", protoSCTP, 81, false}}},
		{name: "UDP only does not open TCP", protos: everything,
			policies: []knp{{name: "udp-only", namespace: "x", pods: podA, ingress: []krule{{ports: []kport{{proto: protoUDP, num: 81}}}}}},
			checks:   []check{{"y/a", "x/a", protoUDP, 81, true}, {"y/a", "x/a", protoTCP, 81, false}, {"y/a", "x/a", protoSCTP, 81, false}}},
		{name: "any port on one protocol", protos: everything,
			policies: []knp{{name: "any-udp", namespace: "x", pods: podA, ingress: []krule{{ports: []kport{{proto: protoUDP}}}}}},
			checks:   []check{{"y/a", "x/a", protoUDP, 80, true}, {"y/a", "x/a", protoUDP, 81, true}, {"y/a", "x/a", protoTCP, 80, false}}},
	}
	prev := kcase{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kl.apply(t, prev, c) })
		prev = c
		if t.Failed() {
			return
		}
	}

	// An updated policy: from port 80 to port 81.
	t.Run("updated policy", func(t *testing.T) {
		p := knp{name: "update-me", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: nsY}}, ports: []kport{{num: 80}}}}}
		kl.apply(t, prev, kcase{name: "before", policies: []knp{p}, checks: []check{{"y/a", "x/a", protoTCP, 80, true}}})
		p.ingress[0].ports[0].num = 81
		kl.apply(t, kcase{}, kcase{name: "after", policies: []knp{p}, checks: []check{{"y/a", "x/a", protoTCP, 80, false}, {"y/a", "x/a", protoTCP, 81, true}}})
		prev = kcase{policies: []knp{p}}
	})

	// Label changes: the namespace a rule admits, the pod a rule admits,
	// and the pod a policy selects.
	t.Run("label changes", func(t *testing.T) {
		ctx := context.Background()
		pols := []knp{
			{name: "from-team-blue", namespace: "x", pods: podA, ingress: []krule{{peers: []kpeer{{namespaces: sel(labels{"team": "blue"})}}}}},
			{name: "from-pod-role-client", namespace: "y", pods: podA, ingress: []krule{{peers: []kpeer{{pods: sel(labels{"role": "client"})}}}}},
			{name: "deny-role-locked", namespace: "z", pods: sel(labels{"role": "locked"}), types: []string{"Ingress"}},
		}
		kl.apply(t, prev, kcase{name: "labels before", policies: pols,
			checks: []check{{"z/a", "x/a", protoTCP, 80, false}, {"y/b", "y/a", protoTCP, 80, false}, {"x/a", "z/c", protoTCP, 80, true}}})
		prev = kcase{policies: pols}
		kl.labelNamespace(ctx, t, "z", "team", "blue")
		kl.labelPod(ctx, t, "y/b", "role", "client")
		kl.labelPod(ctx, t, "z/c", "role", "locked")
		kl.apply(t, kcase{}, kcase{name: "labels after", policies: pols,
			checks: []check{{"z/a", "x/a", protoTCP, 80, true}, {"y/b", "y/a", protoTCP, 80, true}, {"x/a", "z/c", protoTCP, 80, false}}})
		kl.unlabelNamespace(ctx, t, "z", "team")
		kl.unlabelPod(ctx, t, "y/b", "role")
		kl.unlabelPod(ctx, t, "z/c", "role")
		kl.apply(t, kcase{}, kcase{name: "labels removed", policies: pols,
			checks: []check{{"z/a", "x/a", protoTCP, 80, false}, {"y/b", "y/a", protoTCP, 80, false}, {"x/a", "z/c", protoTCP, 80, true}}})
	})

	// Deleting the policies restores all traffic.
	t.Run("policies deleted", func(t *testing.T) {
		kl.apply(t, prev, kcase{name: "deleted", protos: everything})
		prev = kcase{}
	})

	t.Run("a new pod is never reachable against the policies that select it", func(t *testing.T) {
		kl.newPodNeverReachable(t)
	})
	t.Run("the lab command", func(t *testing.T) { kl.cli(t) })
	t.Logf("Kubernetes network policy e2e: %s", time.Since(began).Round(time.Millisecond))
}

func (kl *kubeLab) labelPod(ctx context.Context, t *testing.T, key, k, v string) {
	t.Helper()
	if _, err := kl.l.KubectlOutput(ctx, "", "label", "pod", "-n", strings.Split(key, "/")[0], strings.Split(key, "/")[1], k+"="+v, "--overwrite"); err != nil {
		t.Fatal(err)
	}
	kl.mu.Lock()
	p := kl.pods[key]
	p.labels = cloneLabels(p.labels)
	p.labels[k] = v
	kl.pods[key] = p
	kl.mu.Unlock()
}

func (kl *kubeLab) unlabelPod(ctx context.Context, t *testing.T, key, k string) {
	t.Helper()
	if _, err := kl.l.KubectlOutput(ctx, "", "label", "pod", "-n", strings.Split(key, "/")[0], strings.Split(key, "/")[1], k+"-"); err != nil {
		t.Fatal(err)
	}
	kl.mu.Lock()
	p := kl.pods[key]
	p.labels = cloneLabels(p.labels)
	delete(p.labels, k)
	kl.pods[key] = p
	kl.mu.Unlock()
}

func (kl *kubeLab) labelNamespace(ctx context.Context, t *testing.T, ns, k, v string) {
	t.Helper()
	if _, err := kl.l.KubectlOutput(ctx, "", "label", "namespace", ns, k+"="+v, "--overwrite"); err != nil {
		t.Fatal(err)
	}
	kl.mu.Lock()
	kl.ns[ns] = cloneLabels(kl.ns[ns])
	kl.ns[ns][k] = v
	kl.mu.Unlock()
}

func (kl *kubeLab) unlabelNamespace(ctx context.Context, t *testing.T, ns, k string) {
	t.Helper()
	if _, err := kl.l.KubectlOutput(ctx, "", "label", "namespace", ns, k+"-"); err != nil {
		t.Fatal(err)
	}
	kl.mu.Lock()
	kl.ns[ns] = cloneLabels(kl.ns[ns])
	delete(kl.ns[ns], k)
	kl.mu.Unlock()
}

func cloneLabels(l labels) labels {
	out := labels{}
	for k, v := range l {
		out[k] = v
	}
	return out
}

// newPodNeverReachable applies a policy admitting only pod b of x into
// the pods of x labelled app=web, then creates such pods one after the
// other on every node: from the moment each ADD returns, every probe
// from y/a (which no policy admits) fails, while x/b gets through.
func (kl *kubeLab) newPodNeverReachable(t *testing.T) {
	ctx := context.Background()
	pol := knp{name: "web-from-b", namespace: "x", pods: sel(labels{"app": "web"}), ingress: []krule{{peers: []kpeer{{pods: podSel("b")}}}}}
	if _, err := kl.l.KubectlOutput(ctx, pol.yaml(), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = kl.l.KubectlOutput(ctx, pol.yaml(), "delete", "-f", "-") }()
	// The policy is in place once it blocks an existing web pod.
	if err := kl.addPod(ctx, kl.l.Nodes()[0].Name, "x", "web-0", labels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, policyConverge, func() error {
		if kl.l.Probe(ctx, "y/a", kl.pods["x/web-0"].ip, 80, ProtoTCP, kubeProbeTimeout) == nil {
			return errors.New("y/a still reaches x/web-0")
		}
		return nil
	})
	for i, n := range kl.l.Nodes() {
		name := fmt.Sprintf("web-%d", i+1)
		if err := kl.addPod(ctx, n.Name, "x", name, labels{"app": "web"}); err != nil {
			t.Fatal(err)
		}
		ip := kl.pods["x/"+name].ip
		added := time.Now()
		deadline := added.Add(2 * time.Second)
		probes := 0
		for time.Now().Before(deadline) {
			var wg sync.WaitGroup
			for _, proto := range []string{ProtoTCP, ProtoUDP, ProtoSCTP} {
				wg.Go(func() {
					if err := kl.l.Probe(ctx, "y/a", ip, 80, proto, 150*time.Millisecond); err == nil {
						t.Errorf("y/a reached the new pod x/%s on %s/80 %s after its ADD returned", name, proto, time.Since(added).Round(time.Millisecond))
					}
				})
			}
			wg.Wait()
			probes += 3
		}
		if err := kl.l.Probe(ctx, "x/b", ip, 80, ProtoTCP, 5*time.Second); err != nil {
			t.Errorf("x/b, which the policy admits, does not reach x/%s: %v", name, err)
		}
		t.Logf("x/%s on %s: %d probes from y/a all dropped, x/b admitted", name, n.Name, probes)
	}
}

func podSel(name string) *ksel { return sel(labels{"pod": name}) }

// eventually retries fn every 50 ms until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cli drives the lab binary against the Kubernetes lab: a pod with
// labels, servers and a requested address, kubectl, and probes that
// follow a NetworkPolicy applied with kubectl.
func (kl *kubeLab) cli(t *testing.T) {
	bin := filepath.Join(binDir, "lab")
	run := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--name", kl.l.Name(), "--state-dir", testRoot, "--bin-dir", binDir}, args...)...)
		out, err := cmd.CombinedOutput()
		if code := cmdExit(err); (err == nil && wantCode != 0) || (err != nil && code != wantCode) {
			t.Fatalf("lab %s: exit %d, want %d: %v\n%s", strings.Join(args, " "), code, wantCode, err, out)
		}
		return string(out)
	}
	// Up left the lab locked by this process: the commands, other
	// processes, wait for that lock.
	_ = kl.l.Close()
	want := "10.244.250.7"
	run(0, "pod", "add", "node2", "z/cli", "--labels", "app=cli", "--serve", "8080/tcp,53/udp", "--ip", want)
	if out := run(0, "kubectl", "--", "get", "pod", "-n", "z", "cli", "-o", "jsonpath={.status.podIP} {.metadata.annotations}"); !strings.HasPrefix(out, want+" ") ||
		!strings.Contains(out, `"cni.projectcalico.org/podIP":"`+want+`/32"`) {
		t.Errorf("pod z/cli: %s", out)
	}
	if out := run(0, "kubectl", "--", "get", "pod", "-n", "z", "cli", "-o", "jsonpath={.spec.containers[*].ports[*].name}"); out != "serve-8080-tcp serve-53-udp" {
		t.Errorf("named container ports: %q", out)
	}
	run(0, "probe", "x/a", "z/cli", "--port", "8080")
	run(0, "probe", "x/a", "z/cli", "--port", "53", "--protocol", "udp")
	pol := knp{name: "cli-deny", namespace: "z", pods: sel(labels{"app": "cli"}), types: []string{"Ingress"}}
	cmd := exec.Command(bin, "--name", kl.l.Name(), "--state-dir", testRoot, "kubectl", "--", "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(pol.yaml())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lab kubectl -- apply: %v\n%s", err, out)
	}
	deadline := time.Now().Add(policyConverge)
	for {
		out, err := exec.Command(bin, "--name", kl.l.Name(), "--state-dir", testRoot, "probe", "x/a", "z/cli", "--port", "8080", "--timeout", "300ms").CombinedOutput()
		if cmdExit(err) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe still gets through the deny policy: %v %s", err, out)
		}
	}
	run(0, "kubectl", "--", "delete", "networkpolicy", "-n", "z", "cli-deny")
	run(0, "pod", "del", "node2", "z/cli")
	if out := run(1, "kubectl", "--", "get", "pod", "-n", "z", "cli"); !strings.Contains(out, "NotFound") {
		t.Errorf("after pod del: %s", out)
	}
}

// TestDemo runs `make demo`'s lab.Demo: the fabric, the pods, the ping
// matrix and the NetworkPolicy taking effect, then everything removed.
func TestDemo(t *testing.T) {
	requireLab(t)
	kube := kubetest.Bin(t)
	var out strings.Builder
	name := "tdemo" + fmt.Sprint(time.Now().UnixNano()%100000)
	err := Demo(context.Background(), DemoOptions{Name: name, BinDir: binDir, StateRoot: testRoot, KubeBinDir: kube, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"30 of 30 pairs reach each other", "knp.default.web-from-frontend", "probed until enforced", "✗ dropped", "✓ demo done", "lab " + name + " removed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out.String())
		}
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pl-"+name+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}
