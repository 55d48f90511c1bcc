package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
	anpclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// adminClient is a network-policy-api client of the lab's API server.
func (l *Lab) adminClient(t testing.TB) anpclient.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", l.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = l.dialIn(l.kubeNS())
	// As Kube's: client-go's default 5 QPS would delay the benchmark's
	// writes, and count the delay as enforcement time.
	cfg.QPS, cfg.Burst = 500, 1000
	ac, err := anpclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

// explained runs calicoctl policy explain for TCP 80 from src to dst on
// the first node and wants line in its output.
func explained(t *testing.T, l *Lab, src, dst, line string) {
	t.Helper()
	out, err := l.Calicoctl(context.Background(), l.Nodes()[0].Name, nil, "policy", "explain", "--from", src, "--to", dst, "--protocol", "tcp", "--port", "80")
	if err != nil {
		t.Fatalf("calicoctl policy explain: %v\n%s", err, out)
	}
	if !strings.Contains(out, line) {
		t.Errorf("calicoctl policy explain does not say %q:\n%s", line, out)
	}
}

// TestAdminNetworkPolicyTiers proves with real packets, on iptables and
// on eBPF, the three places the network-policy-api puts a cluster
// admin's policy relative to NetworkPolicy: an ANP Deny of namespace x's
// egress to namespace y wins over a NetworkPolicy allowing it; an ANP
// Pass hands the decision to NetworkPolicy (which then allows or denies);
// a BANP Deny loses to a NetworkPolicy allow and holds where no
// NetworkPolicy selects the pod; of two ANPs with the same priority, the
// one whose name sorts first decides. calicoctl policy explain names the
// ANP and BANP rules that decided.
func TestAdminNetworkPolicyTiers(t *testing.T) {
	for _, dp := range []struct {
		name string
		bpf  bool
	}{{"iptables", false}, {"bpf", true}} {
		t.Run(dp.name, func(t *testing.T) { testAdminTiers(t, dp.bpf) })
	}
}

func testAdminTiers(t *testing.T, bpf bool) {
	requireLab(t)
	l := newLab(t, Options{Nodes: 2, Kubernetes: true, KubeBinDir: kubetest.Bin(t), BPF: bpf})
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	ac := l.adminClient(t)
	ctx := context.Background()
	for _, ns := range []string{"x", "y"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"ns": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := l.Nodes()
	serve := []ServePort{{80, ProtoTCP}}
	if _, err := l.AddPodWith(ctx, nodes[0].Name, "x", "a", PodOptions{Labels: map[string]string{"pod": "a"}, Serve: serve}); err != nil {
		t.Fatal(err)
	}
	b, err := l.AddPodWith(ctx, nodes[1].Name, "y", "b", PodOptions{Labels: map[string]string{"pod": "b"}, Serve: serve})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// reach waits until x/a → y/b TCP 80 is as wanted, then checks that it
	// stays so for five more probes.
	reach := func(step string, want bool) {
		t.Helper()
		probe := func() bool { return l.Probe(ctx, "x/a", b.IP, 80, ProtoTCP, kubeProbeTimeout) == nil }
		eventually(t, 20*time.Second, func() error {
			if got := probe(); got != want {
				return fmt.Errorf("%s: x/a → y/b reachable %v, want %v", step, got, want)
			}
			return nil
		})
		for i := range 5 {
			if got := probe(); got != want {
				t.Fatalf("%s: probe %d after convergence: reachable %v, want %v", step, i, got, want)
			}
		}
	}
	// np selects y/b and allows ingress from the namespaces with ns=from.
	np := func(from string) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "from-" + from, Namespace: "y"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": from}}}}}},
			},
		}
	}
	nps := kc.NetworkingV1().NetworkPolicies("y")
	anps := ac.PolicyV1alpha1().AdminNetworkPolicies()

	reach("no policy", true)
	if _, err := nps.Create(ctx, np("x"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("NetworkPolicy allowing x", true)

	anp := &anpv1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "x-not-to-y"},
		Spec: anpv1.AdminNetworkPolicySpec{
			Priority: 10,
			Subject:  anpv1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}},
			Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: "deny-to-y", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				To: []anpv1.AdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}}}}},
		},
	}
	if anp, err = anps.Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("ANP Deny over the NetworkPolicy allowing x", false)
	explained(t, l, "x/a", b.IP.String(), `Decided by: rule 0 (Deny) "deny-to-y" of AdminNetworkPolicy x-not-to-y, of GlobalNetworkPolicy kanp.adminnetworkpolicy.x-not-to-y in tier adminnetworkpolicy (egress)`)

	// Pass: the NetworkPolicy decides. It allows x... (read again: the
	// controller wrote its status meanwhile)
	if anp, err = anps.Get(ctx, anp.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	anp.Spec.Egress[0].Name, anp.Spec.Egress[0].Action = "pass-to-y", anpv1.AdminNetworkPolicyRuleActionPass
	if anp, err = anps.Update(ctx, anp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("ANP Pass, NetworkPolicy allowing x", true)
	// ...and once it allows only z, denies x: Pass allows nothing itself.
	if err := nps.Delete(ctx, "from-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Create(ctx, np("z"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("ANP Pass, NetworkPolicy allowing only z", false)
	if err := anps.Delete(ctx, anp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nps.Delete(ctx, "from-z", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("no policy again", true)

	// Equal priorities: the API lets the implementation pick; Palisade,
	// as Calico, orders equal orders by name. The Deny is created first
	// and its name sorts last: the Allow decides x's egress. (No
	// NetworkPolicy on y here: an egress Allow of x does not decide y's
	// ingress.)
	tied := func(name string, action anpv1.AdminNetworkPolicyRuleAction) *anpv1.AdminNetworkPolicy {
		return &anpv1.AdminNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: anpv1.AdminNetworkPolicySpec{
				Priority: 20,
				Subject:  anpv1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}},
				Egress: []anpv1.AdminNetworkPolicyEgressRule{{Name: name, Action: action,
					To: []anpv1.AdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}}}}},
			},
		}
	}
	if _, err := anps.Create(ctx, tied("tie-b-deny", anpv1.AdminNetworkPolicyRuleActionDeny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("ANP Deny at priority 20", false)
	if _, err := anps.Create(ctx, tied("tie-a-allow", anpv1.AdminNetworkPolicyRuleActionAllow), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("ANP Allow and ANP Deny both at priority 20", true)
	explained(t, l, "x/a", b.IP.String(), `Decided by: rule 0 (Allow) "tie-a-allow" of AdminNetworkPolicy tie-a-allow`)
	// The Deny goes first: every state on the way (both, the Allow
	// alone, none) is reachable, so the probes below cannot meet the
	// Deny alone while the deletions are still being enforced.
	for _, name := range []string{"tie-b-deny", "tie-a-allow"} {
		if err := anps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reach("no policy, after the tie", true)

	// The BANP denies y's ingress from x where no NetworkPolicy selects
	// y/b; a NetworkPolicy allowing x overrides it.
	banp := &anpv1.BaselineAdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: anpv1.BaselineAdminNetworkPolicySpec{
			Subject: anpv1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}},
			Ingress: []anpv1.BaselineAdminNetworkPolicyIngressRule{{Name: "deny-from-x", Action: anpv1.BaselineAdminNetworkPolicyRuleActionDeny,
				From: []anpv1.AdminNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}}}}},
		},
	}
	if _, err := ac.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, banp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("BANP Deny, no NetworkPolicy", false)
	explained(t, l, "x/a", b.IP.String(), `Decided by: rule 0 (Deny) "deny-from-x" of BaselineAdminNetworkPolicy default, of GlobalNetworkPolicy kbanp.baselineadminnetworkpolicy.default in tier baselineadminnetworkpolicy (ingress)`)
	if _, err := nps.Create(ctx, np("x"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("BANP Deny under a NetworkPolicy allowing x", true)
	if err := nps.Delete(ctx, "from-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reach("BANP Deny once the NetworkPolicy is gone", false)
}
