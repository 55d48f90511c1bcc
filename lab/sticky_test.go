package lab

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// stickyGrace is the leak grace period the sticky and churn tests give
// calico-kube-controllers' IPAM garbage collection, with stickyPeriod its
// node controller's resync period.
const (
	stickyGrace  = 2 * time.Second
	stickyPeriod = "1s"
)

// shortenIPAMGC sets the node controller's leakGracePeriod and
// reconcilerPeriod in the KubeControllersConfiguration, as a user would
// (calicoctl patch): the controllers restart with them.
func shortenIPAMGC(t testing.TB, l *Lab) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"controllers":{"node":{"reconcilerPeriod":%q,"leakGracePeriod":%q}}}}`, stickyPeriod, stickyGrace)
	waitFor(t, 30*time.Second, "the KubeControllersConfiguration patched", func() (bool, string) {
		out, err := l.Calicoctl(context.Background(), "node1", nil, "patch", "kubecontrollersconfiguration", "default", "-p", patch)
		return err == nil, fmt.Sprint(out, err)
	})
	if err := l.waitKubeControllers(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// ipamState is what `calicoctl ipam show --ip` says of an address:
// "free", "reserved" (a sticky reservation no container uses), "used by
// <container>" or "in use" (an ordinary allocation).
func ipamState(t testing.TB, l *Lab, ip netip.Addr) string {
	t.Helper()
	out, err := l.Calicoctl(context.Background(), "node1", nil, "ipam", "show", "--ip="+ip.String())
	if err != nil {
		t.Fatalf("calicoctl ipam show --ip=%s: %v\n%s", ip, err, out)
	}
	switch {
	case strings.Contains(out, "is not currently assigned"):
		return "free"
	case strings.Contains(out, "not used by a pod now"):
		return "reserved"
	case strings.Contains(out, "used by container "):
		return "used by " + strings.Fields(out[strings.Index(out, "used by container ")+len("used by container "):])[0]
	case strings.Contains(out, "is in use"):
		return "in use"
	}
	t.Fatalf("calicoctl ipam show --ip=%s: unexpected output\n%s", ip, out)
	return ""
}

var (
	checkLeakedRE   = regexp.MustCompile(`Found (\d+) IPs that are allocated in IPAM but not actually in use\.`)
	checkReservedRE = regexp.MustCompile(`Found (\d+) sticky IPs reserved for their pods \(ipReleasePolicy\), (\d+) of them used by no workload endpoint now`)
)

// ipamCheck runs `calicoctl ipam check` and returns its counts of leaked,
// reserved and reserved-but-idle addresses; it fails the test on any
// problem found.
func ipamCheck(t testing.TB, l *Lab) (leaked, reserved, idle int) {
	t.Helper()
	out, err := l.Calicoctl(context.Background(), "node1", nil, "ipam", "check", "--show-problem-ips")
	if err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Check complete; found 0 problems.") {
		t.Errorf("calicoctl ipam check found problems:\n%s", out)
	}
	m := checkLeakedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("calicoctl ipam check printed no leak count:\n%s", out)
	}
	fmt.Sscan(m[1], &leaked)
	if m := checkReservedRE.FindStringSubmatch(out); m != nil {
		fmt.Sscan(m[1], &reserved)
		fmt.Sscan(m[2], &idle)
	}
	return leaked, reserved, idle
}

// TestStickyStatefulSet runs sticky addresses against the real apiserver
// on three nodes. A StatefulSet pod (ipReleasePolicy immutable, and
// never) deleted and re-created on another node gets its address again,
// and pods on every node reach it there (its block is another node's: a
// borrowed /32). Then each policy scaled down and up: empty releases the
// address at DEL; immutable keeps it while the StatefulSet exists and
// wants the pod's ordinal, and IPAM GC releases it once the set is
// deleted or scaled down past it; never keeps it after the set is
// deleted, and a new set of the same name gets it. `calicoctl ipam
// check` agrees at each step.
func TestStickyStatefulSet(t *testing.T) {
	requireLab(t)
	l := newLab(t, Options{Name: "tsty", Nodes: 3, Kubernetes: true, KubeBinDir: kubetest.Bin(t)})
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	shortenIPAMGC(t, l)
	const ns = "sticky"
	add := func(node, pod, set, policy string) Pod {
		t.Helper()
		o := PodOptions{}
		if set != "" {
			o.Owner = Owner{Kind: "StatefulSet", Name: set}
			o.Annotations = map[string]string{k8s.AnnotationIPReleasePolicy: policy}
		}
		p, err := l.AddPodWith(ctx, node, ns, pod, o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	del := func(pod string) {
		t.Helper()
		if err := l.DelPod(ctx, ns+"/"+pod); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := l.KubectlOutput(ctx, "", append([]string{"-n", ns}, args...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	wantState := func(ip netip.Addr, who, want string) {
		t.Helper()
		if got := ipamState(t, l, ip); got != want && !(want == "used" && strings.HasPrefix(got, "used by ")) {
			t.Errorf("%s's address %s: %s, want %s", who, ip, got, want)
		}
	}
	reachable := func(p Pod, why string) {
		t.Helper()
		for _, c := range []string{"c-1", "c-2", "c-3"} {
			waitFor(t, 30*time.Second, fmt.Sprintf("%s: %s reaches %s at %s on %s", why, c, p.Key(), p.IP, p.Node), func() (bool, string) {
				_, err := l.Ping(ctx, ns+"/"+c, p.IP, 500*time.Millisecond)
				return err == nil, fmt.Sprint(err)
			})
		}
	}
	// A client on every node; the StatefulSets' pods.
	for i, n := range l.Nodes() {
		add(n.Name, fmt.Sprintf("c-%d", i+1), "", "")
	}
	imm0, imm1 := add("node1", "imm-0", "imm", "immutable"), add("node2", "imm-1", "imm", "immutable")
	nev0 := add("node2", "nev-0", "nev", "never")
	gone0 := add("node3", "gone-0", "gone", "immutable")
	emp0, emp1 := add("node3", "emp-0", "emp", ""), add("node1", "emp-1", "emp", "")
	reachable(imm0, "first placement")
	if _, reserved, _ := ipamCheck(t, l); reserved != 4 {
		t.Errorf("ipam check: %d sticky reservations, want 4 (imm-0, imm-1, nev-0, gone-0)", reserved)
	}

	// Deleted and re-created on another node: the same address, reached
	// from every node.
	for _, c := range []struct {
		p               Pod
		set, policy, to string
	}{{imm0, "imm", "immutable", "node3"}, {nev0, "nev", "never", "node1"}} {
		del(c.p.Name)
		wantState(c.p.IP, c.p.Key(), "reserved")
		again := add(c.to, c.p.Name, c.set, c.policy)
		if again.IP != c.p.IP {
			t.Fatalf("%s re-created on %s got %s, on %s it had %s", c.p.Key(), c.to, again.IP, c.p.Node, c.p.IP)
		}
		wantState(again.IP, again.Key(), "used")
		reachable(again, "re-created on "+c.to)
	}
	// Empty policy: released at the pod's DEL; scaled down and up.
	del(emp1.Name)
	wantState(emp1.IP, emp1.Key(), "free")
	kubectl("scale", "statefulset", "emp", "--replicas=1")
	emp1 = add("node2", "emp-1", "emp", "")
	wantState(emp1.IP, emp1.Key(), "in use")
	wantState(emp0.IP, emp0.Key(), "in use")

	// imm-1's pod gone, its StatefulSet still wanting ordinal 1; nev-0's
	// pod and its StatefulSet gone; gone-0's pod and StatefulSet gone
	// last. Once GC has released gone-0 (after the grace period), it has
	// looked at the other two for at least as long and kept them.
	del(imm1.Name)
	del("nev-0")
	if err := kc.AppsV1().StatefulSets(ns).Delete(ctx, "nev", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	del(gone0.Name)
	wantState(gone0.IP, gone0.Key(), "reserved")
	if err := kc.AppsV1().StatefulSets(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	waitFor(t, 10*stickyGrace+20*time.Second, "IPAM GC releases gone-0's address (its StatefulSet deleted)", func() (bool, string) {
		s := ipamState(t, l, gone0.IP)
		return s == "free", s
	})
	if d := time.Since(began); d < stickyGrace {
		t.Errorf("gone-0's address released %s after its StatefulSet was deleted, before the grace period %s", d, stickyGrace)
	}
	wantState(imm1.IP, imm1.Key(), "reserved")
	wantState(nev0.IP, nev0.Key(), "reserved")
	leaked, reserved, idle := ipamCheck(t, l)
	if leaked != 0 || reserved != 3 || idle != 2 {
		t.Errorf("ipam check: %d leaked, %d reserved, %d idle; want 0, 3 (imm-0, imm-1, nev-0), 2 (imm-1, nev-0)", leaked, reserved, idle)
	}

	// never: a new StatefulSet of the same name gets the address, on a
	// third node, reached from every node.
	nev0b := add("node3", "nev-0", "nev", "never")
	if nev0b.IP != nev0.IP {
		t.Errorf("nev-0 of the new StatefulSet nev got %s, the old one's had %s", nev0b.IP, nev0.IP)
	}
	reachable(nev0b, "a new StatefulSet of the same name")

	// immutable scaled down past imm-1: released; scaled up again: imm-1
	// gets an address again (and keeps it from then on).
	kubectl("scale", "statefulset", "imm", "--replicas=1")
	waitFor(t, 10*stickyGrace+20*time.Second, "IPAM GC releases imm-1's address (scaled down past it)", func() (bool, string) {
		s := ipamState(t, l, imm1.IP)
		return s == "free", s
	})
	wantState(imm0.IP, imm0.Key(), "used")
	imm1b := add("node1", "imm-1", "imm", "immutable")
	wantState(imm1b.IP, imm1b.Key(), "used")
	del(imm1b.Name)
	imm1c := add("node2", "imm-1", "imm", "immutable")
	if imm1c.IP != imm1b.IP {
		t.Errorf("imm-1 after the scale-up: %s, then re-created %s", imm1b.IP, imm1c.IP)
	}
	leaked, reserved, idle = ipamCheck(t, l)
	if leaked != 0 || reserved != 3 || idle != 0 {
		t.Errorf("ipam check at the end: %d leaked, %d reserved, %d idle; want 0, 3 (imm-0, imm-1, nev-0), 0", leaked, reserved, idle)
	}
}
