package felix

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/kubeslices"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
)

// sliceFeed is felix's EndpointSlice source for a kernel test: the test
// sends the slices (calico-node reads them from the Kubernetes API:
// felix/kubeslices, tested against a real kube-apiserver).
type sliceFeed struct{ c chan []calc.Update }

func (f *sliceFeed) Run(ctx context.Context, out func([]calc.Update)) {
	for {
		select {
		case u := <-f.c:
			out(u)
		case <-ctx.Done():
			return
		}
	}
}

func (f *sliceFeed) slice(t *testing.T, ns, name, svc string, port uint16, addrs ...string) {
	t.Helper()
	s := &calc.EndpointSlice{Service: svc, Ports: []calc.ServicePort{{Proto: "tcp", Port: port}}}
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, netip.MustParseAddr(a))
	}
	f.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlice, Namespace: ns, Name: name}, Value: s}}
}

// TestServicePolicy: with real namespaces and packets, on the iptables
// and the eBPF dataplanes, an egress rule to destination.services lets
// the client reach only the Service's endpoints and only on the slice's
// port; an ingress rule from source.services admits only the Service's
// endpoints; an endpoint removed from its EndpointSlice loses access at
// once, and one added gains it. Before the slices were read the Allow
// rules match nothing.
func TestServicePolicy(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newClusterNoFelix(t, dp, false)
			feed := &sliceFeed{c: make(chan []calc.Update)}
			cfg := c.felixConfigOf()
			cfg.EndpointSlices = feed
			runFelix(t, c.ctx, c.cancel, cfg)
			setupPods(c) // web 10.65.0.1 (ns-a), client 10.65.0.2 (ns-a), other 10.65.0.3 (ns-b)

			rs := c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: to-backend, namespace: ns-a}
spec:
  selector: app == 'client'
  types: [Egress]
  egress:
  - {action: Allow, destination: {services: {name: backend}}}
  - {action: Allow, protocol: UDP, destination: {ports: [53]}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: from-clients}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress:
  - {action: Allow, source: {services: {name: clients, namespace: ns-a}}}
  - {action: Allow, protocol: ICMP}
`)
			c.waitPolicies(rs, true) // (the second rules keep the policies in BPF programs before the slices are read)
			// Not read yet: the Allows match nothing.
			c.expect(deny("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080), allow("web", "other", "tcp", 8080))

			feed.slice(t, "ns-a", "backend-1", "backend", 8080, "10.65.0.1", "10.65.0.3")
			feed.slice(t, "ns-a", "clients-1", "clients", 9000, "10.65.0.2")
			// A Service of the same name in another namespace is another.
			feed.slice(t, "ns-b", "backend-1", "backend", 8081, "10.65.0.1")
			feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}
			c.expect(
				allow("client", "web", "tcp", 8080), allow("client", "other", "tcp", 8080),
				deny("client", "web", "tcp", 8081), deny("client", "web", "udp", 8080), deny("client", "ext", "tcp", 8080),
				deny("client", "node", "tcp", 8080),
				// Ingress to web: from the clients Service's endpoints only.
				deny("other", "web", "tcp", 8080), deny("ext", "web", "tcp", 8080),
			)

			// other leaves backend's slice, web's address is on the
			// slice of its other Service only; other joins clients.
			feed.slice(t, "ns-a", "backend-1", "backend", 8080, "10.65.0.1")
			feed.slice(t, "ns-a", "clients-1", "clients", 9000, "10.65.0.2", "10.65.0.3")
			c.expect(
				allow("client", "web", "tcp", 8080), deny("client", "other", "tcp", 8080),
				// On any port: a source Service has no ports.
				allow("other", "web", "tcp", 8080), allow("other", "web", "tcp", 9001),
			)
			// The slice goes: nothing left to reach.
			feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlice, Namespace: "ns-a", Name: "backend-1"}}}
			c.expect(deny("client", "web", "tcp", 8080), deny("client", "other", "tcp", 8080))
		})
	}
}

// TestServicePolicyKube is TestServicePolicy's egress half end to end:
// felix reads the EndpointSlices that a real kube-controller-manager makes
// from pods in a real kube-apiserver (through kubeslices, as calico-node
// wires it), and a pod deleted in Kubernetes loses its place in the
// Service, so the client can no longer reach it.
func TestServicePolicyKube(t *testing.T) {
	kc := kubetest.Start(t)
	if err := kc.StartControllerManager(); err != nil {
		t.Fatal(err)
	}
	c := newClusterNoFelix(t, "NFT", false)
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = &kubeslices.Source{Connect: func() (*listwatch.Client, error) { return listwatch.New(kc.Config) }, Log: cfg.Log}
	runFelix(t, c.ctx, c.cancel, cfg)
	setupPods(c)

	ctx := c.ctx
	for _, ns := range []string{"ns-a", "ns-b"} {
		if _, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kc.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "backend", Namespace: "ns-a"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"tier": "backend"},
		Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
	}}
	if _, err := kc.Client.CoreV1().Services("ns-a").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	backend := map[string]string{"tier": "backend"}
	if err := kc.ReadyPod(ctx, "ns-a", "web", nodeName, "10.65.0.1", backend); err != nil {
		t.Fatal(err)
	}
	// A pod of ns-a in Kubernetes holding other's address.
	if err := kc.ReadyPod(ctx, "ns-a", "other", nodeName, "10.65.0.3", backend); err != nil {
		t.Fatal(err)
	}

	rs := c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: to-backend, namespace: ns-a}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Allow, destination: {services: {name: backend}}}]
`)
	c.waitPolicies(rs, true)
	c.expect(allow("client", "web", "tcp", 8080), allow("client", "other", "tcp", 8080),
		deny("client", "web", "tcp", 8081), deny("client", "ext", "tcp", 8080))
	if err := kc.Client.CoreV1().Pods("ns-a").Delete(ctx, "other", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	c.expect(allow("client", "web", "tcp", 8080), deny("client", "other", "tcp", 8080))
}
