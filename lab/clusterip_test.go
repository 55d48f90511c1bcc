package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// clusterIPAnswers are what a client pod gets through a ClusterIP.
type clusterIPAnswers struct {
	// backends that answered, and the client addresses they saw.
	backends, seen map[string]bool
	// refused: the Service without endpoints refused the connection.
	refused bool
	errs    []string
}

// TestClusterIPWithoutKubeProxy: on the eBPF dataplane without
// kube-proxy, felix load-balances Services in the programs from the
// Services and EndpointSlices of a real kube-apiserver: a ClusterIP whose
// Service targets a named container port reaches both backends, on this
// node and across nodes, each seeing the client's own address, and a
// Service without endpoints refuses. (The same run against the iptables
// dataplane with kube-proxy is not part of it yet: docs/bpf.md.)
func TestClusterIPWithoutKubeProxy(t *testing.T) {
	requireLab(t)
	clusterIPRun(t, Options{Name: "tcipbpf", Nodes: 2, Kubernetes: true, BPF: true, KubeBinDir: kubetest.Bin(t)})
}

func clusterIPRun(t *testing.T, o Options) clusterIPAnswers {
	l := newLab(t, o)
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	nodes := l.Nodes()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve := []ServePort{{Port: 8080, Protocol: ProtoTCP}}
	pods := map[string]Pod{}
	for _, p := range []struct{ name, node string }{{"web-1", nodes[0].Name}, {"web-2", nodes[1].Name}, {"client", nodes[0].Name}} {
		opts := PodOptions{Labels: map[string]string{"app": "web"}, Serve: serve}
		if p.name == "client" {
			opts = PodOptions{Labels: map[string]string{"app": "client"}}
		}
		pod, err := l.AddPodWith(ctx, p.node, "svc", p.name, opts)
		if err != nil {
			t.Fatal(err)
		}
		pods[p.name] = pod
	}
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, sel map[string]string) netip.Addr {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "svc"}, Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString(serve[0].Name()), Protocol: corev1.ProtocolTCP}}}}
		s, err := kc.CoreV1().Services("svc").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return netip.MustParseAddr(s.Spec.ClusterIP)
	}
	web := netip.AddrPortFrom(mk("web", map[string]string{"app": "web"}), 80)
	empty := netip.AddrPortFrom(mk("empty", map[string]string{"app": "nobody"}), 80)

	client := pods["client"].Key()
	out := clusterIPAnswers{backends: map[string]bool{}, seen: map[string]bool{}}
	eventually(t, 30*time.Second, func() error {
		_, err := connect(ctx, l, client, web, time.Second)
		return err
	})
	for range 40 {
		answer, err := connect(ctx, l, client, web, time.Second)
		if err != nil {
			out.errs = append(out.errs, err.Error())
			continue
		}
		name, from, _ := strings.Cut(answer, " from ")
		out.backends[name] = true
		if ap, err := netip.ParseAddrPort(from); err == nil {
			from = ap.Addr().String()
			if from == pods["client"].IP.String() {
				from = "the client"
			}
		}
		out.seen[from] = true
	}
	eventually(t, 30*time.Second, func() error {
		_, err := connect(ctx, l, client, empty, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			out.refused = true
			return nil
		}
		return fmt.Errorf("to a Service without endpoints: %v, want connection refused", err)
	})
	if !out.backends["svc/web-1"] || !out.backends["svc/web-2"] || len(out.errs) > 0 || !out.seen["the client"] || len(out.seen) != 1 {
		t.Errorf("%s: answers %+v, want both backends, the client's address, no error", o.Name, out)
	}
	return out
}
