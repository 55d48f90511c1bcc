package lab

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// anpBenchPods and anpBenchANPs are the scale the goal is set at.
const anpBenchPods, anpBenchANPs = 1000, 100

// BenchmarkAdminNetworkPolicyToEnforced measures, in a two-node lab with
// Kubernetes, 1,000 pods and 100 AdminNetworkPolicies selecting them, the
// time from creating an AdminNetworkPolicy that admits a client to a
// server a NetworkPolicy isolates until the client's first connection is
// answered, and from deleting it until connections are dropped (API
// server, calico-kube-controllers, felix). The reference, interleaved in
// the same run, is a NetworkPolicy admitting the same client. Goals: p99
// ≤ 150 ms and ≤ 1.5× the NetworkPolicy's.
func BenchmarkAdminNetworkPolicyToEnforced(b *testing.B) {
	requireLab(b)
	kube := kubetest.Bin(b)
	began := time.Now()
	l, err := Up(context.Background(), Options{Name: "benchanp", Nodes: 2, BinDir: binDir, StateRoot: testRoot, Kubernetes: true, KubeBinDir: kube})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Down(context.Background()) })
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		b.Fatal(err)
	}
	acl := l.adminClient(b)
	server, client := benchPods(b, l, anpBenchPods)
	dst := netip.AddrPortFrom(server.IP, 8080)
	b.Logf("%d pods after %s", anpBenchPods, time.Since(began).Round(time.Second))
	fillerSel := func(k int) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("filler-%d", k%10)}}
	}
	fillAndIsolate(b, l, anpBenchANPs, func(ctx context.Context, i int) error {
		ports := []anpv1.AdminNetworkPolicyPort{{PortNumber: &anpv1.Port{Protocol: corev1.ProtocolTCP, Port: int32(80 + i%50)}}}
		anp := &anpv1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%d", i)},
			Spec: anpv1.AdminNetworkPolicySpec{Priority: int32(100 + i),
				Subject: anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{
					NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "bench"}},
					PodSelector:       *fillerSel(i)}},
				Ingress: []anpv1.AdminNetworkPolicyIngressRule{{Name: "deny-neighbour", Action: anpv1.AdminNetworkPolicyRuleActionDeny, Ports: &ports,
					From: []anpv1.AdminNetworkPolicyIngressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: *fillerSel(i + 1)}}}}}}}
		_, err := acl.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{})
		return err
	}, client, dst, 60*time.Second)
	b.Logf("%d pods, %d AdminNetworkPolicies and the isolated server ready after %s", anpBenchPods, anpBenchANPs, time.Since(began).Round(time.Second))

	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(8080)
	allowNP := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-client", Namespace: "bench"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"app": "client"}}}}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}}}}}
	anpPorts := []anpv1.AdminNetworkPolicyPort{{PortNumber: &anpv1.Port{Protocol: corev1.ProtocolTCP, Port: 8080}}}
	allowANP := &anpv1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-client"},
		Spec: anpv1.AdminNetworkPolicySpec{Priority: 5,
			Subject: anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}}}},
			Ingress: []anpv1.AdminNetworkPolicyIngressRule{{Name: "allow-client", Action: anpv1.AdminNetworkPolicyRuleActionAllow, Ports: &anpPorts,
				From: []anpv1.AdminNetworkPolicyIngressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}}}}}
	// 200 samples a path (create and delete): p99 is the second slowest.
	compareToEnforced(b, l, client, dst, 2, 100, benchPath{name: "AdminNetworkPolicy", on: func() error {
		_, err := acl.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, allowANP, metav1.CreateOptions{})
		return err
	}, off: func() error {
		return acl.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, allowANP.Name, metav1.DeleteOptions{})
	}}, benchPath{name: "NetworkPolicy", on: func() error {
		_, err := kc.NetworkingV1().NetworkPolicies("bench").Create(ctx, allowNP, metav1.CreateOptions{})
		return err
	}, off: func() error {
		return kc.NetworkingV1().NetworkPolicies("bench").Delete(ctx, allowNP.Name, metav1.DeleteOptions{})
	}})
}
