package calc

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// TestExplainService: a packet to a Service address is explained as the
// eBPF dataplane's load balancer treats it: the translation (frontend,
// candidates, the backend judged) is named, and policy is judged on the
// backend's address and target port, not the Service's; a node port on a
// node's address likewise; a Service without endpoints is refused before
// any policy; without the Services (the datastore has none) the address
// is what it is.
func TestExplainService(t *testing.T) {
	g := explainGraph(t, `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.18.0.1/24}}
`)
	vip := netip.MustParseAddr("10.96.0.10")
	noSvc, err := g.Explain(tcpTo(pod("prod", "client"), addr(vip.String()), 80))
	if err != nil || noSvc.Service != nil {
		t.Fatalf("before the Services were read: %+v, %v; want no translation", noSvc, err)
	}
	g.OnUpdates([]Update{
		{Key: datastore.Key{Kind: KindService, Namespace: "prod", Name: "web"}, Value: &Service{Type: ServiceNodePort, ClusterIPs: []netip.Addr{vip},
			Ports: []ServiceSpecPort{{Name: "http", Proto: "tcp", Port: 80, NodePort: 30080}}}},
		{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: "prod", Name: "web-1"}, Value: &EndpointSlice{Service: "web",
			Ports: []ServicePort{{Proto: "tcp", Port: 8080, Name: "http"}}, Endpoints: []SliceEndpoint{{Addr: netip.MustParseAddr("10.0.0.1"), Ready: true, Serving: true}}}},
		{Key: datastore.Key{Kind: KindService, Namespace: "prod", Name: "empty"}, Value: &Service{Type: ServiceClusterIP,
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.11")}, Ports: []ServiceSpecPort{{Proto: "tcp", Port: 80}}}},
		{Key: datastore.Key{Kind: KindEndpointSlicesSynced}, Value: &EndpointSlice{}},
	})
	for _, c := range []struct {
		name string
		q    Query
		kind string
	}{
		{"cluster address", tcpTo(pod("prod", "client"), addr(vip.String()), 80), "cluster"},
		{"node port", tcpTo(pod("dev", "other"), addr("198.18.0.1"), 30080), "nodePort"},
	} {
		x, err := g.Explain(c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if x.Service == nil || x.Service.Service != "prod/web" || x.Service.Kind != c.kind || x.Service.Backend != "10.0.0.1:8080" ||
			!slices.Equal(x.Service.Backends, []string{"10.0.0.1:8080"}) {
			t.Errorf("%s: translation %+v", c.name, x.Service)
		}
		if x.To.Kind != PeerWorkload || x.To.Pod != "web" || x.Packet.DestinationPort != 8080 {
			t.Errorf("%s: judged on %+v port %d, want pod web on 8080", c.name, x.To, x.Packet.DestinationPort)
		}
		if x.Verdict != VerdictAllow || !strings.Contains(strings.Join(x.Notes, "\n"), "judged on its one backend 10.0.0.1:8080") {
			t.Errorf("%s: %s, notes %v; want allowed by web's rule on 8080 (not the Service's 80)", c.name, x.Verdict, x.Notes)
		}
	}
	x, err := g.Explain(tcpTo(pod("prod", "client"), addr("10.96.0.11"), 80))
	if err != nil || x.Verdict != VerdictDeny || x.To.Kind != PeerService || len(x.Sides) != 0 || x.Service == nil || x.Service.Backend != "" {
		t.Errorf("Service without endpoints: %+v, %v; want refused before policy", x, err)
	}
}
