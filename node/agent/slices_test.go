package agent

import (
	"context"
	"os"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// TestEndpointSlicesWiring: calico-node gives felix an EndpointSlice
// source only inside Kubernetes (KUBECONFIG, or the in-cluster service
// account's KUBERNETES_SERVICE_HOST), and the one it gives reads a real
// kube-apiserver through the kubeconfig KUBECONFIG names.
func TestEndpointSlicesWiring(t *testing.T) {
	logger := log.WithField("test", t.Name())
	if src := endpointSlices(func(string) string { return "" }, logger); src != nil {
		t.Fatalf("outside Kubernetes felix got an EndpointSlice source %T", src)
	}
	kc := kubetest.Start(t)
	t.Setenv("KUBECONFIG", kc.Kubeconfig)
	src := endpointSlices(os.Getenv, logger)
	if src == nil {
		t.Fatal("with KUBECONFIG felix got no EndpointSlice source")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, proto := int32(5432), corev1.ProtocolTCP
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-x", Namespace: "default",
		Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.65.2.1"}}},
		Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}}}
	if _, err := kc.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan calc.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(us []calc.Update) {
			for _, u := range us {
				select {
				case got <- u:
				case <-ctx.Done():
				}
			}
		})
	}()
	defer func() { cancel(); <-done }()
	var sawSlice bool
	for {
		select {
		case u := <-got:
			if s, ok := u.Value.(*calc.EndpointSlice); ok && u.Key.Kind == calc.KindEndpointSlice && s.Service == "db" &&
				len(s.Addresses) == 1 && s.Addresses[0].String() == "10.65.2.1" && len(s.Ports) == 1 && s.Ports[0] == (calc.ServicePort{Proto: "tcp", Port: 5432}) {
				sawSlice = true
			}
			if u.Key.Kind == calc.KindEndpointSlicesSynced {
				if !sawSlice {
					t.Fatal("synced before the existing slice default/db-x was delivered")
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("no synced mark from the source (slice seen: %v)", sawSlice)
		}
	}
}
