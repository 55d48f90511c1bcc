package kubeslices_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/kubeslices"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
)

// view folds the source's updates into what felix's sets of a Service
// would hold: "address,proto:port" per Service.
type view struct {
	mu     sync.Mutex
	slices map[string]*calc.EndpointSlice
	synced bool
	// atSync is the view when the synced mark came.
	atSync map[string][]string
}

func (v *view) out(us []calc.Update) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, u := range us {
		switch u.Key.Kind {
		case calc.KindEndpointSlicesSynced:
			v.synced, v.atSync = true, v.members()
		case calc.KindEndpointSlice:
			key := u.Key.Namespace + "/" + u.Key.Name
			if s, ok := u.Value.(*calc.EndpointSlice); ok {
				v.slices[key] = s
			} else {
				delete(v.slices, key)
			}
		}
	}
}

func (v *view) members() map[string][]string {
	out := map[string][]string{}
	for _, s := range v.slices {
		svc := s.Namespace + "/" + s.Service
		for _, a := range s.Addresses {
			for _, p := range s.Ports {
				out[svc] = append(out[svc], fmt.Sprintf("%s,%s:%d", a, p.Proto, p.Port))
			}
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

func (v *view) waitFor(t *testing.T, what string, ok func(map[string][]string) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v.mu.Lock()
		m := v.members()
		v.mu.Unlock()
		if ok(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached; the source says %v", what, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSource runs the source against a real kube-apiserver whose
// kube-controller-manager makes the EndpointSlices from pods: slices that
// exist at the start come before the synced mark, an endpoint that goes
// (its pod deleted) and one that comes change the source's view, and a
// Service deleted takes its slices with it.
func TestSource(t *testing.T) {
	c := kubetest.Start(t)
	if err := c.StartControllerManager(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kc := c.Client
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "db"},
		Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(15432), Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
	}}
	if _, err := kc.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ name, ip, app string }{{"db-0", "10.65.1.1", "db"}, {"web", "10.65.1.9", "web"}} {
		if err := c.ReadyPod(ctx, "shop", p.name, "n1", p.ip, map[string]string{"app": p.app}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the controller's slice, so that it is in the first list.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := kc.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 1 && len(l.Items[0].Endpoints) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no EndpointSlice for shop/db: %v %v", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	v := &view{slices: map[string]*calc.EndpointSlice{}}
	src := &kubeslices.Source{Connect: func() (*listwatch.Client, error) { return listwatch.New(c.Config) }}
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, v.out) }()
	t.Cleanup(func() { cancel(); <-done })

	// The slice's ports are the pods' (targetPort), with their protocols.
	want := []string{"10.65.1.1,tcp:15432", "10.65.1.1,udp:53"}
	v.waitFor(t, "synced", func(map[string][]string) bool { v.mu.Lock(); defer v.mu.Unlock(); return v.synced })
	if got := v.atSync["shop/db"]; !slices.Equal(got, want) {
		t.Fatalf("at the synced mark shop/db holds %v, want %v", got, want)
	}

	if err := c.ReadyPod(ctx, "shop", "db-1", "n1", "10.65.1.2", map[string]string{"app": "db"}); err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "db-1 added", func(m map[string][]string) bool {
		return slices.Equal(m["shop/db"], []string{"10.65.1.1,tcp:15432", "10.65.1.1,udp:53", "10.65.1.2,tcp:15432", "10.65.1.2,udp:53"})
	})
	if err := kc.CoreV1().Pods("shop").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "db-0 removed", func(m map[string][]string) bool {
		return slices.Equal(m["shop/db"], []string{"10.65.1.2,tcp:15432", "10.65.1.2,udp:53"})
	})
	if err := kc.CoreV1().Services("shop").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "Service deleted", func(m map[string][]string) bool { return len(m["shop/db"]) == 0 })
}

// TestConvert: what felix keeps of a slice.
func TestConvert(t *testing.T) {
	port := func(p int32) *int32 { return &p }
	udp, sctp, tcp := corev1.ProtocolUDP, corev1.ProtocolSCTP, corev1.ProtocolTCP
	cases := []struct {
		name  string
		slice discoveryv1.EndpointSlice
		want  string
	}{
		{"addresses of every endpoint, ready or not, ports with numbers", discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}},
				{Addresses: []string{"10.0.0.2", "bogus"}, Conditions: discoveryv1.EndpointConditions{Ready: new(bool)}}},
			Ports: []discoveryv1.EndpointPort{{Port: port(80)}, {Port: port(53), Protocol: &udp}, {Port: port(9), Protocol: &sctp}, {Protocol: &tcp}},
		}, "db [10.0.0.1 10.0.0.2] [{tcp 80 } {udp 53 } {sctp 9 }]"},
		{"IPv6", discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00::1"}}},
		}, "db [fd00::1] []"},
		{"FQDN slices have no addresses", discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"db.example"}}},
		}, "db [] []"},
		{"a slice of no Service", discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}}, " [10.0.0.1] []"},
	}
	for _, tc := range cases {
		s := kubeslices.Convert(&tc.slice)
		if got := fmt.Sprintf("%s %v %v", s.Service, s.Addresses, s.Ports); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
