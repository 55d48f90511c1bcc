package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// lbPoolCIDR is the test's LoadBalancer pool (inside the fabric's
// 198.18.0.0/15, apart from the border's 198.19.0.0/24).
const lbPoolCIDR = "198.19.20.0/26"

// TestKubeProxyOptions: --kube-proxy is refused without --kubernetes,
// before anything is made; real nodes run kube-proxy unless --bpf, where
// it is off unless asked for.
func TestKubeProxyOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Name: "tkpopt", KubeProxy: true}, `lab "tkpopt": --kube-proxy needs --kubernetes (kube-proxy watches the lab's API server)`},
	} {
		c.o.BinDir, c.o.StateRoot = binDir, t.TempDir()
		err := c.o.defaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	for _, c := range []struct {
		o    Options
		want bool
	}{
		{Options{Kubelet: true}, true},
		{Options{Kubelet: true, BPF: true}, false},
		{Options{Kubelet: true, BPF: true, KubeProxy: true}, true},
	} {
		o := c.o
		if err := o.kubeletDefaults(); err != nil {
			t.Fatal(err)
		}
		if o.KubeProxy != c.want || !o.Kubernetes {
			t.Errorf("%+v: kube-proxy %t, kubernetes %t; want kube-proxy %t", c.o, o.KubeProxy, o.Kubernetes, c.want)
		}
	}
}

// TestUpFlagsGolden compares `lab up --help` and the refused --kube-proxy
// combinations (exit 1, before any lab is made) with testdata/up.golden.
func TestUpFlagsGolden(t *testing.T) {
	bin := filepath.Join(binDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built (make build)", bin)
	}
	root := t.TempDir()
	var b strings.Builder
	for _, c := range [][]string{{"--help"}, {"--kube-proxy"}, {"--kubelet", "--kube-proxy=false"}} {
		cmd := exec.Command(bin, append([]string{"--name", "tkp-flags", "--state-dir", root, "--bin-dir", binDir, "up"}, c...)...)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&b, "$ lab up %s\n(exit %d)\n%s\n", strings.Join(c, " "), exitOf(err), strings.ReplaceAll(string(out), bin, "lab"))
		if want := c[0] == "--help"; (err == nil) != want {
			t.Errorf("up %s: exit %d", strings.Join(c, " "), exitOf(err))
		}
	}
	if ents, _ := os.ReadDir(root); len(ents) > 0 {
		t.Errorf("a refused lab up left %d entries in its state directory", len(ents))
	}
	golden := filepath.Join("testdata", "up.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestUpFlagsGolden -update writes it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("lab up output differs from %s (-update rewrites it):\n%s", golden, b.String())
	}
}

// connect opens a TCP connection from a lab namespace ("ext", a node, a
// pod) and returns the server's answer ("ns/pod from addr:port").
func connect(ctx context.Context, l *Lab, from string, dst netip.AddrPort, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var c net.Conn
	if err := l.InNamespace(from, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
		return err
	}); err != nil {
		return "", fmt.Errorf("%s → %s: %w", from, dst, err)
	}
	defer c.Close()
	d, _ := ctx.Deadline()
	_ = c.SetDeadline(d)
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), fmt.Errorf("%s → %s: %w", from, dst, err)
	}
	return string(b), nil
}

var viaRE = regexp.MustCompile(`via (\S+)`)

// borderNextHops is the border BIRD's next hops for exactly prefix
// (`birdc show route <prefix>`), sorted; none when it has no route.
func borderNextHops(ctx context.Context, l *Lab, prefix string) ([]string, string, error) {
	out, err := l.Output(ctx, "border", nil, "birdc", "show", "route", prefix)
	if err != nil && !strings.Contains(out, "Network not found") {
		return nil, out, err
	}
	var hops []string
	for _, m := range viaRE.FindAllStringSubmatch(out, -1) {
		hops = append(hops, m[1])
	}
	sort.Strings(hops)
	return hops, out, nil
}

// waitBorder waits until the border's routes for prefix go via exactly
// want (none: withdrawn).
func waitBorder(t *testing.T, l *Lab, prefix string, want ...netip.Addr) {
	t.Helper()
	var ws []string
	for _, a := range want {
		ws = append(ws, a.String())
	}
	sort.Strings(ws)
	eventually(t, 30*time.Second, func() error {
		got, out, err := borderNextHops(context.Background(), l, prefix)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(ws, ",") {
			return fmt.Errorf("border routes for %s via %v, want %v:\n%s", prefix, got, ws, out)
		}
		return nil
	})
}

// TestKubeProxyLoadBalancer: with --kube-proxy, the real kube-proxy on
// every node turns a LoadBalancer address the loadbalancer controller
// assigned and calico-node advertised into traffic: a client behind the
// border router reaches it over the BGP route (ECMP over the nodes for
// externalTrafficPolicy Cluster, only the endpoint's node for Local, the
// client's address kept at the pod), policy applies to it, a ClusterIP
// is reached from a pod on another node, a destination.services rule
// admits the Service and nothing else, and deleting the Service
// withdraws the route.
func TestKubeProxyLoadBalancer(t *testing.T) {
	requireLab(t)
	l := newLab(t, Options{Name: "tkp", Nodes: 3, Border: true, Kubernetes: true, KubeProxy: true, KubeBinDir: kubetest.Bin(t)})
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	nodes := l.Nodes()
	var st strings.Builder
	if err := l.Status(ctx, &st); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if want := fmt.Sprintf("kube-proxy (iptables mode, hostname %s): running, healthz ok", n.Name); !strings.Contains(st.String(), want) {
			t.Errorf("lab status lacks %q:\n%s", want, st.String())
		}
	}

	if err := l.Apply(ctx, "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: lb-pool}\nspec: {cidr: "+lbPoolCIDR+", allowedUses: [LoadBalancer]}\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Calicoctl(ctx, nodes[0].Name, nil, "patch", "bgpconfiguration", "default", "-p",
		`{"spec":{"serviceLoadBalancerIPs":[{"cidr":"`+lbPoolCIDR+`"}],"serviceLoadBalancerAggregation":"Disabled"}}`); err != nil {
		t.Fatal(err)
	}
	web, err := l.AddPodWith(ctx, nodes[1].Name, "lb", "web-1", PodOptions{Labels: map[string]string{"app": "web"}, Serve: []ServePort{{Port: 8080, Protocol: ProtoTCP}}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.AddPodWith(ctx, nodes[2].Name, "lb", "other", PodOptions{Labels: map[string]string{"app": "other"}, Serve: []ServePort{{Port: 8080, Protocol: ProtoTCP}}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := l.AddPodWith(ctx, nodes[0].Name, "lb", "client", PodOptions{Labels: map[string]string{"role": "client"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "lb"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if svc, err = kc.CoreV1().Services("lb").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var lbIP netip.Addr
	eventually(t, 30*time.Second, func() error {
		s, err := kc.CoreV1().Services("lb").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("service lb/web has no LoadBalancer address yet")
		}
		lbIP, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err
	})
	if !netip.MustParsePrefix(lbPoolCIDR).Contains(lbIP) {
		t.Fatalf("LoadBalancer address %s outside the pool %s", lbIP, lbPoolCIDR)
	}
	lb := netip.AddrPortFrom(lbIP, 80)
	host := lbIP.String() + "/32"
	clientFrom := func(answer string) string {
		_, from, _ := strings.Cut(answer, " from ")
		ap, err := netip.ParseAddrPort(from)
		if err != nil {
			return "?" + answer
		}
		return ap.Addr().String()
	}

	t.Run("cluster policy: ECMP over every node, traffic through kube-proxy", func(t *testing.T) {
		waitBorder(t, l, host, nodes[0].IP, nodes[1].IP, nodes[2].IP)
		var answer string
		eventually(t, 30*time.Second, func() (err error) {
			answer, err = connect(ctx, l, "ext", lb, 2*time.Second)
			return err
		})
		if !strings.HasPrefix(answer, "lb/web-1 from ") {
			t.Fatalf("ext → %s answered %q, want lb/web-1", lb, answer)
		}
		// Cluster: kube-proxy masquerades outside traffic to a node's
		// address.
		if from := clientFrom(answer); from == extAddr.String() {
			t.Errorf("with externalTrafficPolicy Cluster the pod saw the client's own %s (%q)", from, answer)
		}
	})

	t.Run("ClusterIP from a pod on another node", func(t *testing.T) {
		cip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
		var answer string
		eventually(t, 30*time.Second, func() (err error) {
			answer, err = connect(ctx, l, client.Key(), cip, 2*time.Second)
			return err
		})
		if !strings.HasPrefix(answer, "lb/web-1 from ") || clientFrom(answer) != client.IP.String() {
			t.Errorf("%s → %s answered %q, want lb/web-1 seeing %s", client.Key(), cip, answer, client.IP)
		}
	})

	t.Run("destination.services admits the Service's endpoints only", func(t *testing.T) {
		pol := `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: client-to-web, namespace: lb}
spec:
  selector: role == 'client'
  types: [Egress]
  egress:
  - action: Allow
    destination: {services: {name: web, namespace: lb}}
`
		if err := l.Apply(ctx, pol); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := l.Calicoctl(ctx, nodes[0].Name, nil, "delete", "networkpolicy", "client-to-web", "-n", "lb"); err != nil {
				t.Error(err)
			}
		}()
		otherAddr := netip.AddrPortFrom(other.IP, 8080)
		eventually(t, 30*time.Second, func() error {
			if _, err := connect(ctx, l, client.Key(), otherAddr, time.Second); err == nil {
				return fmt.Errorf("%s still reaches %s (not in the Service)", client.Key(), otherAddr)
			}
			return nil
		})
		cip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
		for _, dst := range []netip.AddrPort{cip, netip.AddrPortFrom(web.IP, 8080)} {
			if answer, err := connect(ctx, l, client.Key(), dst, 5*time.Second); err != nil || !strings.HasPrefix(answer, "lb/web-1 ") {
				t.Errorf("with the policy %s → %s: %q, %v; want lb/web-1", client.Key(), dst, answer, err)
			}
		}
	})

	t.Run("local policy: only the endpoint's node, the client's address kept", func(t *testing.T) {
		if _, err := kc.CoreV1().Services("lb").Patch(ctx, "web", types.MergePatchType,
			[]byte(`{"spec":{"externalTrafficPolicy":"Local"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBorder(t, l, host, nodes[1].IP)
		var answer string
		eventually(t, 30*time.Second, func() (err error) {
			answer, err = connect(ctx, l, "ext", lb, 2*time.Second)
			if err == nil && clientFrom(answer) != extAddr.String() {
				return fmt.Errorf("ext → %s: the pod saw %q, want %s", lb, answer, extAddr)
			}
			return err
		})
		if !strings.HasPrefix(answer, "lb/web-1 from ") {
			t.Fatalf("ext → %s answered %q, want lb/web-1", lb, answer)
		}
	})

	t.Run("policy at the pod applies to the outside client", func(t *testing.T) {
		np := func(cidr string) string {
			return `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-ingress, namespace: lb}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress: [{from: [{ipBlock: {cidr: ` + cidr + `}}]}]
`
		}
		if _, err := l.KubectlOutput(ctx, np("198.19.0.99/32"), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			if answer, err := connect(ctx, l, "ext", lb, time.Second); err == nil {
				return fmt.Errorf("ext still reaches %s past a policy admitting only 198.19.0.99: %q", lb, answer)
			}
			return nil
		})
		if answer, err := connect(ctx, l, "ext", lb, 2*time.Second); err == nil {
			t.Errorf("ext reached %s again past the policy: %q", lb, answer)
		}
		if _, err := l.KubectlOutput(ctx, np(extAddr.String()+"/32"), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			answer, err := connect(ctx, l, "ext", lb, 2*time.Second)
			if err == nil && clientFrom(answer) != extAddr.String() {
				return fmt.Errorf("the pod saw %q", answer)
			}
			return err
		})
	})

	t.Run("the Service deleted: withdrawn at the border", func(t *testing.T) {
		if err := kc.CoreV1().Services("lb").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBorder(t, l, host)
		if answer, err := connect(ctx, l, "ext", lb, time.Second); err == nil {
			t.Errorf("ext still reaches the deleted Service's %s: %q", lb, answer)
		}
	})

	t.Run("kube-proxy killed is restarted by its supervisor", func(t *testing.T) {
		n := nodes[0]
		p, _ := l.Proc("kube-proxy/" + n.Name)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.PID, p.PID))
		if err != nil {
			t.Fatal(err)
		}
		var child int
		if _, err := fmt.Sscan(string(b), &child); err != nil {
			t.Fatalf("kube-proxy's supervisor (pid %d) has no child: %q", p.PID, b)
		}
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.PID, p.PID))
			if f := strings.Fields(string(b)); len(f) == 0 || f[0] == fmt.Sprint(child) {
				return fmt.Errorf("kube-proxy on %s not restarted yet", n.Name)
			}
			return l.kubeProxyHealthy(ctx, n)
		})
	})

	t.Run("a node added gets kube-proxy, a node removed loses it", func(t *testing.T) {
		n, err := l.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := l.Proc("kube-proxy/" + n.Name)
		if !ok || !p.Alive() {
			t.Fatalf("no kube-proxy running on the added %s", n.Name)
		}
		if err := l.kubeProxyHealthy(ctx, n); err != nil {
			t.Errorf("kube-proxy on %s: %v", n.Name, err)
		}
		if err := l.RemoveNode(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		if p.Alive() {
			t.Errorf("kube-proxy of the removed %s still runs (pid %d)", n.Name, p.PID)
		}
		if _, ok := l.Proc("kube-proxy/" + n.Name); ok {
			t.Errorf("the removed %s's kube-proxy is still recorded", n.Name)
		}
	})
}
