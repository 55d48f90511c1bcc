package commands_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// lbHandles masks the LoadBalancer handles, which hash a Service's UID.
var lbHandles = regexp.MustCompile(`lb-[0-9a-f]{40}`)

// TestIPAMLoadBalancerAddresses: the LoadBalancer addresses the
// loadbalancer controller assigns count in ipam show, and ipam check,
// reading the Services from a real kube-apiserver (KUBECONFIG or
// --kubeconfig), takes the address of an existing LoadBalancer Service as
// in use by it and reports as leaked the address of a Service that was
// deleted, of a Service deleted and created again under the same name
// (the new object holds nothing yet) and of one that is no longer a
// LoadBalancer. A release from the report frees exactly those. With no
// kubeconfig the addresses are never called leaked; with an unreachable
// API server the check fails.
func TestIPAMLoadBalancerAddresses(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	kc := kubetest.Start(t)
	ctx := context.Background()
	c.mustRun(t, `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: lb-pool}
spec: {cidr: 203.0.113.0/28, blockSize: 28, allowedUses: [LoadBalancer]}
`, "apply", "-f", "-")

	svcs := kc.Client.CoreV1().Services("default")
	create := func(name string, typ corev1.ServiceType) *corev1.Service {
		t.Helper()
		s, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating service %s: %v", name, err)
		}
		return s
	}
	del := func(name string) {
		t.Helper()
		if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting service %s: %v", name, err)
		}
	}
	assign := func(svc *corev1.Service, ip string) {
		t.Helper()
		err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr(ip), Hostname: ipam.LoadBalancerHost, Intent: ipam.IntentLoadBalancer,
			HandleID: ipam.LoadBalancerHandle(svc.Namespace, svc.Name, string(svc.UID)),
			Attrs:    map[string]string{ipam.AttrService: svc.Name, ipam.AttrNamespace: svc.Namespace, ipam.AttrType: ipam.AttrTypeLoadBalancer}})
		if err != nil {
			t.Fatalf("assigning %s to %s: %v", ip, svc.Name, err)
		}
	}
	assign(create("web", corev1.ServiceTypeLoadBalancer), "203.0.113.1")
	assign(create("gone", corev1.ServiceTypeLoadBalancer), "203.0.113.2")
	del("gone")
	assign(create("again", corev1.ServiceTypeLoadBalancer), "203.0.113.3")
	del("again")
	create("again", corev1.ServiceTypeLoadBalancer)
	// No longer a LoadBalancer: ClusterIP was always its type here, as
	// a Service whose type changed looks once the change is made.
	assign(create("plain", corev1.ServiceTypeClusterIP), "203.0.113.4")

	kube := []string{"KUBECONFIG=" + kc.Kubeconfig}
	run := func(env []string, args ...string) string {
		t.Helper()
		r := c.run(t, "", env, args...)
		if r.code != 0 {
			t.Fatalf("calicoctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return lbHandles.ReplaceAllString(r.stdout, "lb-<hash>")
	}
	for _, tc := range []struct {
		golden string
		env    []string
		args   []string
	}{
		{"ipam-lb-show.txt", nil, []string{"ipam", "show"}},
		{"ipam-lb-show-ip.txt", nil, []string{"ipam", "show", "--ip=203.0.113.1"}},
		{"ipam-lb-check-problem-ips.txt", kube, []string{"ipam", "check", "--show-problem-ips"}},
		{"ipam-lb-check-all-ips.txt", nil, []string{"ipam", "check", "--show-all-ips", "--kubeconfig=" + kc.Kubeconfig}},
		{"ipam-lb-check-no-kubeconfig.txt", nil, []string{"ipam", "check", "--show-problem-ips"}},
	} {
		t.Run(tc.golden, func(t *testing.T) { golden(t, tc.golden, run(tc.env, tc.args...)) })
	}

	// Unreachable API: a clear error and a non-zero exit, never a guess.
	bad := writeFile(t, t.TempDir(), "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: x}}]
`)
	if r := c.run(t, "", []string{"KUBECONFIG=" + bad}, "ipam", "check"); r.code == 0 || !regexp.MustCompile(`failed to list Services: .*127\.0\.0\.1:1`).MatchString(r.stderr) {
		t.Errorf("ipam check with an unreachable API server: exit %d, stderr %q; want a non-zero exit naming the failed Service list", r.code, r.stderr)
	}

	// A report made without the Services releases none of their addresses.
	dir := t.TempDir()
	noKube := filepath.Join(dir, "nokube.json")
	run(nil, "ipam", "check", "-o", noKube)
	run(nil, "ipam", "release", "--from-report="+noKube, "--force")
	for _, ip := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"} {
		if _, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(ip)); err != nil {
			t.Errorf("a report made without a kubeconfig released LoadBalancer address %s: %v", ip, err)
		}
	}

	report := filepath.Join(dir, "report.json")
	run(kube, "ipam", "check", "-o", report)
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ipam-lb-check-report.json", lbHandles.ReplaceAllString(reportMask(string(raw)), "lb-<hash>"))
	run(nil, "ipam", "release", "--from-report="+report, "--force")
	for ip, wantHeld := range map[string]bool{"203.0.113.1": true, "203.0.113.2": false, "203.0.113.3": false, "203.0.113.4": false} {
		_, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(ip))
		if held := err == nil; held != wantHeld {
			t.Errorf("after release from the report: %s held %t, want %t", ip, held, wantHeld)
		}
	}
}
