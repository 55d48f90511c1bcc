package listwatch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
)

// TestListWatch: against a real kube-apiserver, the two-group client
// lists Services as typed objects (the apiserver's own "kubernetes" one
// may or may not be there yet) and watches a new Service and
// EndpointSlice arrive.
func TestListWatch(t *testing.T) {
	kc := kubetest.Start(t)
	c, err := listwatch.New(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	svcLW, sliceLW := cache.ToListerWatcherWithContext(c.Services()), cache.ToListerWatcherWithContext(c.EndpointSlices())
	svcs, err := svcLW.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl, ok := svcs.(*corev1.ServiceList)
	if !ok || sl.ResourceVersion == "" || slices.ContainsFunc(sl.Items, func(s corev1.Service) bool { return s.Name == "db" }) {
		t.Fatalf("services: %T %+v", svcs, svcs)
	}
	w, err := svcLW.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: sl.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ew, err := sliceLW.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ew.Stop()

	if _, err := kc.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port, proto := int32(5432), corev1.ProtocolTCP
	if _, err := kc.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.65.0.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan watch.Event{"service": w.ResultChan(), "endpointslice": ew.ResultChan()} {
		for {
			select {
			case ev := <-ch:
				switch o := ev.Object.(type) {
				case *corev1.Service:
					if ev.Type != watch.Added || o.Name != "db" {
						continue
					}
				case *discoveryv1.EndpointSlice:
					if ev.Type != watch.Added || o.Name != "db-1" || len(o.Endpoints) != 1 || o.Endpoints[0].Addresses[0] != "10.65.0.1" {
						continue
					}
				default:
					t.Fatalf("%s watch: %s %T", name, ev.Type, ev.Object)
				}
			case <-ctx.Done():
				t.Fatalf("no %s added", name)
			}
			break
		}
	}
}
