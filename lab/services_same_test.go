package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// serviceRow is one question the same-answers test asks each lab: from a
// client ("pod" on node1, "pod2" on node2, "host1" and "host2" the nodes'
// own namespaces) to a Service port. Add a row to ask more.
type serviceRow struct {
	name    string
	from    string
	service string // web, empty
	proto   string // ProtoTCP, ProtoUDP
}

var serviceRows = []serviceRow{
	{"pod to ClusterIP, TCP", "pod", "web", ProtoTCP},
	{"pod on the other node to ClusterIP, TCP", "pod2", "web", ProtoTCP},
	{"pod to ClusterIP, UDP", "pod", "web", ProtoUDP},
	{"pod to a Service without endpoints, TCP", "pod", "empty", ProtoTCP},
	{"pod to a Service without endpoints, UDP", "pod", "empty", ProtoUDP},
	{"host to ClusterIP, TCP", "host1", "web", ProtoTCP},
	{"other host to ClusterIP, TCP", "host2", "web", ProtoTCP},
	{"host to ClusterIP, UDP", "host1", "web", ProtoUDP},
	{"host to a Service without endpoints, TCP", "host1", "empty", ProtoTCP},
	{"host to a Service without endpoints, UDP", "host1", "empty", ProtoUDP},
}

// serviceLab is one way of running Services the test compares.
type serviceLab struct {
	name string
	opts Options
}

// TestServicesSameAnswers: the lab's Services give the same answers with
// kube-proxy (iptables mode, on the iptables dataplane) and without it
// (felix's eBPF dataplane load-balancing in its programs, host clients
// by its connect-time load balancer): for every row of serviceRows, the
// same backends answer, they see the same sources (the client pod's own
// address, or the client node's), and a Service without endpoints is
// refused the same way. The answers are checked too: both backends (a
// named target port resolved per pod, on this node and across), the
// client's own address, a refusal. (It replaces
// TestClusterIPWithoutKubeProxy, whose checks are its eBPF lab's.)
func TestServicesSameAnswers(t *testing.T) {
	requireLab(t)
	bin := kubetest.Bin(t)
	labs := []serviceLab{
		{"kube-proxy", Options{Name: "tsamekp", Nodes: 2, Kubernetes: true, KubeProxy: true, KubeBinDir: bin}},
		{"eBPF without kube-proxy", Options{Name: "tsamebpf", Nodes: 2, Kubernetes: true, BPF: true, KubeBinDir: bin}},
	}
	answers := make([]map[string]string, len(labs))
	for i, sl := range labs {
		t.Run(sl.name, func(t *testing.T) { answers[i] = serviceAnswers(t, sl.opts) })
	}
	for _, r := range serviceRows {
		for i := 1; i < len(labs); i++ {
			if a, b := answers[0][r.name], answers[i][r.name]; a != b {
				t.Errorf("%s: %s answers %q, %s %q", r.name, labs[0].name, a, labs[i].name, b)
			}
		}
	}
}

// serviceAnswers brings a lab up and asks every row, 20 times each; an
// answer is the sorted set of backends and of sources they saw, or the
// error ("refused").
func serviceAnswers(t *testing.T, o Options) map[string]string {
	l := newLab(t, o)
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	nodes := l.Nodes()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "same"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve := []ServePort{{Port: 8080, Protocol: ProtoTCP}, {Port: 8053, Protocol: ProtoUDP}}
	pods := map[string]Pod{}
	for _, p := range []struct{ name, node string }{{"web-1", nodes[0].Name}, {"web-2", nodes[1].Name}, {"client", nodes[0].Name}, {"client2", nodes[1].Name}} {
		opts := PodOptions{Labels: map[string]string{"app": "web"}, Serve: serve}
		if strings.HasPrefix(p.name, "client") {
			opts = PodOptions{Labels: map[string]string{"app": "client"}}
		}
		pod, err := l.AddPodWith(ctx, p.node, "same", p.name, opts)
		if err != nil {
			t.Fatal(err)
		}
		pods[p.name] = pod
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]netip.Addr{}
	for _, name := range []string{"web", "empty"} {
		sel := map[string]string{"app": "web"}
		if name == "empty" {
			sel = map[string]string{"app": "nobody"}
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "same"}, Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString(serve[0].Name()), Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, TargetPort: intstr.FromString(serve[1].Name()), Protocol: corev1.ProtocolUDP},
			}}}
		s, err := kc.CoreV1().Services("same").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addrs[name] = netip.MustParseAddr(s.Spec.ClusterIP)
	}
	clients := map[string]string{"pod": pods["client"].Key(), "pod2": pods["client2"].Key(), "host1": nodes[0].Name, "host2": nodes[1].Name}
	// Who a source address is, so answers compare across labs.
	who := map[string]string{pods["client"].IP.String(): "the client pod", pods["client2"].IP.String(): "the client pod",
		nodes[0].IP.String(): "the client's node", nodes[1].IP.String(): "the client's node"}
	dst := func(r serviceRow) netip.AddrPort {
		if r.proto == ProtoUDP {
			return netip.AddrPortFrom(addrs[r.service], 53)
		}
		return netip.AddrPortFrom(addrs[r.service], 80)
	}
	// Both backends answer every client once the Services are programmed.
	for _, r := range serviceRows {
		if r.service != "web" {
			continue
		}
		eventually(t, 30*time.Second, func() error {
			_, _, err := askService(ctx, l, clients[r.from], r.proto, dst(r))
			return err
		})
	}
	out := map[string]string{}
	for _, r := range serviceRows {
		backends, seen, errs := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for range 20 {
			name, from, err := askService(ctx, l, clients[r.from], r.proto, dst(r))
			if err != nil {
				errs[errClass(err)] = true
				continue
			}
			backends[name] = true
			if from != "" {
				if w, ok := who[from]; ok {
					from = w
				}
				seen[from] = true
			}
		}
		// With kube-proxy on the iptables dataplane, felix's FORWARD
		// accept and kube-proxy's REJECT of a Service without endpoints
		// take turns first in FORWARD (each inserts itself at the top),
		// so some of a pod's attempts go unanswered: a refusal is the
		// row's answer when there is one.
		if len(backends) == 0 && errs["refused"] && errs["no answer"] {
			t.Logf("%s: some attempts got no answer, the others were refused", r.name)
			delete(errs, "no answer")
		}
		ans := fmt.Sprintf("backends %v", keys(backends))
		if len(seen) > 0 {
			ans += fmt.Sprintf(", seen %v", keys(seen))
		}
		if len(errs) > 0 {
			ans += fmt.Sprintf(", errors %v", keys(errs))
		}
		out[r.name] = ans
		t.Logf("%s: %s", r.name, ans)
		// Besides being the same in every lab, answers are right.
		switch {
		case r.service == "web" && (len(backends) != 2 || len(errs) > 0):
			t.Errorf("%s: %s, want both backends and no error", r.name, ans)
		case r.service == "web" && r.proto == ProtoTCP && (len(seen) != 1 || !seen[map[bool]string{true: "the client pod", false: "the client's node"}[strings.HasPrefix(r.from, "pod")]]):
			t.Errorf("%s: %s, want the client's own address seen", r.name, ans)
		case r.service == "empty" && (len(backends) > 0 || len(errs) != 1 || errs["no answer"]):
			t.Errorf("%s: %s, want one kind of refusal", r.name, ans)
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// errClass names an error the same way whichever path refused it.
func errClass(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EPERM):
		return "not permitted"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNoAnswer):
		return "no answer"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no answer"
	}
	return err.Error()
}

// askService asks a Service port once from a lab namespace: the backend
// that answered and, over TCP, the source address it saw.
func askService(ctx context.Context, l *Lab, from, proto string, dst netip.AddrPort) (name, seen string, err error) {
	if proto == ProtoTCP {
		answer, err := connect(ctx, l, from, dst, time.Second)
		if err != nil {
			return "", "", err
		}
		name, src, _ := strings.Cut(answer, " from ")
		if ap, err := netip.ParseAddrPort(src); err == nil {
			src = ap.Addr().String()
		}
		return name, src, nil
	}
	var c net.Conn
	if err := l.InNamespace(from, func() (err error) {
		c, err = net.Dial("udp", dst.String())
		return err
	}); err != nil {
		return "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("probe")); err != nil {
		return "", "", err
	}
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	if err != nil {
		return "", "", err
	}
	return string(buf[:n]), "", nil
}
