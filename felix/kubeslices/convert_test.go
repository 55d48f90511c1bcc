package kubeslices

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConvertService: a Service's cluster addresses (none for
// ExternalName) and its TCP, UDP and SCTP ports with their names; a
// slice's endpoints keep their conditions (absent ready and serving are
// true) and its ports their names.
func TestConvertService(t *testing.T) {
	for _, c := range []struct {
		name string
		svc  corev1.ServiceSpec
		want string
	}{
		{"dual stack", corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00:96::10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
			`[10.96.0.10 fd00:96::10] [{http tcp 80 0} {dns udp 53 0}]`},
		{"clusterIP only", corev1.ServiceSpec{ClusterIP: "10.96.0.11", Ports: []corev1.ServicePort{{Port: 9, Protocol: corev1.ProtocolSCTP}}},
			`[10.96.0.11] [{ sctp 9 0}]`},
		{"headless", corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"}, Ports: []corev1.ServicePort{{Port: 80}}}, `[] [{ tcp 80 0}]`},
		{"ExternalName", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ClusterIP: "10.96.0.12", ExternalName: "example.org"}, `[] []`},
	} {
		s := ConvertService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Spec: c.svc})
		if got := fmt.Sprint(s.ClusterIPs, s.Ports); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	f, tr := false, true
	name, port, nodeB := "http", int32(8080), "node-b"
	es := Convert(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-1"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}, {Addresses: []string{"10.1.0.2"}, NodeName: &nodeB, Conditions: discoveryv1.EndpointConditions{Ready: &f, Serving: &tr, Terminating: &tr}}},
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}}})
	if got, want := fmt.Sprint(es.Endpoints, es.Ports), "[{10.1.0.1 true true false } {10.1.0.2 false true true node-b}] [{tcp 8080 http}]"; got != want {
		t.Errorf("slice: %s, want %s", got, want)
	}
}

// TestConvertServiceExternal: a LoadBalancer Service's type, node ports,
// external and ingress addresses, traffic policies, ClientIP affinity
// (its timeout, Kubernetes' default when unset) and Calico's Maglev
// annotation.
func TestConvertServiceExternal(t *testing.T) {
	local, secs := corev1.ServiceInternalTrafficPolicyLocal, int32(60)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Annotations: map[string]string{ExternalTrafficStrategyAnnotation: "maglev"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ExternalIPs: []string{"198.51.100.7"},
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, InternalTrafficPolicy: &local,
			SessionAffinity: corev1.ServiceAffinityClientIP, SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &secs}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.8"}, {Hostname: "lb.example"}}}}}
	slim, err := slimService(svc)
	if err != nil {
		t.Fatal(err)
	}
	s := ConvertService(slim.(*corev1.Service))
	got := fmt.Sprint(s.Type, s.ClusterIPs, s.ExternalIPs, s.LoadBalancerIPs, s.Ports, s.ExternalLocal, s.InternalLocal, s.AffinitySeconds, s.Maglev)
	if want := "LoadBalancer[10.96.0.10] [198.51.100.7] [198.51.100.8] [{http tcp 80 30080}] true true 60 true"; got != want {
		t.Errorf("after the informer's transform: %s, want %s", got, want)
	}
	svc.Spec.SessionAffinityConfig = nil
	svc.Annotations = nil
	if s := ConvertService(svc); s.AffinitySeconds != 10800 || s.Maglev {
		t.Errorf("ClientIP without a timeout: %d s, Maglev %v; want 10800 s, no Maglev", s.AffinitySeconds, s.Maglev)
	}
}
