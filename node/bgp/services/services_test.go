package services

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/node/bgp/paths"
)

func ptr[T any](v T) *T { return &v }

func ep(node string, ready *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{"10.244.0.5"}, NodeName: ptr(node), Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

func slice(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc"}, Endpoints: eps}
}

func TestFrom(t *testing.T) {
	dual := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00:96::10"}, ExternalIPs: []string{"198.19.200.10", "bogus"},
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
	}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.19.201.10"}, {Hostname: "lb.example"}, {IP: "::ffff:198.19.201.11"}}}}}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Spec: corev1.ServiceSpec{
		ClusterIP: "None", InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal)}}
	legacy := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.30"}}
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	web := paths.Service{Name: "ns/web", ExternalLocal: true, ClusterIPs: addrs("10.96.0.10", "fd00:96::10"),
		ExternalIPs: addrs("198.19.200.10"), LoadBalancerIPs: addrs("198.19.201.10", "198.19.201.11")}
	webHere := web
	webHere.LocalEndpoint, webHere.AnyEndpoint = true, true
	webElsewhere := web
	webElsewhere.AnyEndpoint = true
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   paths.Service
	}{
		{"no slices", dual, nil, web},
		{"ready here", dual, []*discoveryv1.EndpointSlice{slice(ep("n2", nil)), slice(ep("n1", ptr(true)))}, webHere},
		{"not ready anywhere", dual, []*discoveryv1.EndpointSlice{slice(ep("n1", ptr(false)), ep("n2", ptr(false)))}, web},
		{"ready unset counts as ready", dual, []*discoveryv1.EndpointSlice{slice(ep("n1", nil))}, webHere},
		{"not ready here, ready elsewhere", dual, []*discoveryv1.EndpointSlice{slice(ep("n1", ptr(false)), ep("n2", ptr(true)))}, webElsewhere},
		{"endpoint without node", dual, []*discoveryv1.EndpointSlice{slice(discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}})}, webElsewhere},
		{"headless, internal Local", headless, nil, paths.Service{Name: "ns/db", InternalLocal: true}},
		{"clusterIP only", legacy, nil, paths.Service{Name: "ns/old", ClusterIPs: addrs("10.96.0.30")}},
		{"many endpoints, the ready local one last", dual, []*discoveryv1.EndpointSlice{slice(ep("n2", ptr(true)), ep("n3", nil), ep("n1", ptr(false)), ep("n4", ptr(true)), ep("n1", ptr(true)))}, webHere},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := From("n1", tc.svc, tc.slices); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("From:\n got %+v\nwant %+v", got, tc.want)
			}
			// The informers' slimmed copies give the same answer.
			slim, _ := slimService(tc.svc)
			var slimmed []*discoveryv1.EndpointSlice
			for _, es := range tc.slices {
				slimmed = append(slimmed, slimSlice("n1", es).(*discoveryv1.EndpointSlice))
			}
			if got := From("n1", slim.(*corev1.Service), slimmed); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("From the slimmed objects:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
