package calc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// lbRecorder keeps the last load balancer the graph passed.
type lbRecorder struct {
	Dataplane
	lb    *LoadBalancer
	calls int
}

func (r *lbRecorder) OnLoadBalancerUpdate(lb *LoadBalancer) { r.lb, r.calls = lb, r.calls+1 }

func (r *lbRecorder) frontends() []string {
	var out []string
	for f, fb := range r.lb.Frontends {
		out = append(out, fmt.Sprintf("%s %s:%d %s %v", fb.Service, f.Proto, f.Port, f.Addr, addrPorts(fb.Backends)))
	}
	slices.Sort(out)
	return out
}

// addrPorts are the backends' addresses and ports.
func addrPorts(bs []Backend) []netip.AddrPort {
	var out []netip.AddrPort
	for _, b := range bs {
		out = append(out, b.AddrPort)
	}
	return out
}

// TestLoadBalancer: each cluster address and port of a Service gets the
// endpoints of its family from the slices' port of the same name and
// protocol (a named target port as resolved per pod); ready endpoints,
// else the serving terminating ones; nothing is passed before the slices
// were read, and a change passes the whole load balancer again.
func TestLoadBalancer(t *testing.T) {
	rec := &lbRecorder{Dataplane: newRecorder()}
	g := NewGraph("node-a", rec)
	svc := func(ns, name string, ips []string, ports ...ServiceSpecPort) Update {
		s := &Service{Ports: ports}
		for _, ip := range ips {
			s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr(ip))
		}
		return Update{Key: datastore.Key{Kind: KindService, Namespace: ns, Name: name}, Value: s}
	}
	slice := func(ns, name, svc string, ports []ServicePort, eps ...SliceEndpoint) Update {
		return Update{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: ns, Name: name}, Value: &EndpointSlice{Service: svc, Ports: ports, Endpoints: eps}}
	}
	ep := func(a string, ready, serving, terminating bool) SliceEndpoint {
		return SliceEndpoint{Addr: netip.MustParseAddr(a), Ready: ready, Serving: serving, Terminating: terminating}
	}
	web := []ServicePort{{Proto: "tcp", Port: 8080, Name: "http"}, {Proto: "udp", Port: 53, Name: "dns"}}
	g.OnUpdates([]Update{
		svc("prod", "web", []string{"10.96.0.10", "fd00:96::10"}, ServiceSpecPort{Name: "http", Proto: "tcp", Port: 80}, ServiceSpecPort{Name: "dns", Proto: "udp", Port: 53}),
		slice("prod", "web-1", "web", web, ep("10.1.0.1", true, true, false), ep("10.1.0.2", false, true, true), ep("fd00::1", true, true, false)),
		// Another pod resolves the named port to another number.
		slice("prod", "web-2", "web", []ServicePort{{Proto: "tcp", Port: 9090, Name: "http"}}, ep("10.1.0.3", true, true, false)),
		svc("prod", "old", []string{"10.96.0.11"}, ServiceSpecPort{Proto: "tcp", Port: 80}),
		slice("prod", "old-1", "old", []ServicePort{{Proto: "tcp", Port: 80}}, ep("10.1.0.9", false, true, true), ep("10.1.0.8", false, false, false)),
		svc("prod", "headless", nil, ServiceSpecPort{Proto: "tcp", Port: 80}),
	})
	g.OnInSync()
	g.Flush()
	if rec.calls != 0 {
		t.Fatalf("load balancer passed before the slices were read")
	}
	g.OnUpdates([]Update{{Key: datastore.Key{Kind: KindEndpointSlicesSynced}, Value: &EndpointSlice{}}})
	g.Flush()
	want := []string{
		"prod/old tcp:80 10.96.0.11 [10.1.0.9:80]",
		"prod/web tcp:80 10.96.0.10 [10.1.0.1:8080 10.1.0.3:9090]",
		"prod/web tcp:80 fd00:96::10 [[fd00::1]:8080]",
		"prod/web udp:53 10.96.0.10 [10.1.0.1:53]",
		"prod/web udp:53 fd00:96::10 [[fd00::1]:53]",
	}
	if got := rec.frontends(); !slices.Equal(got, want) {
		t.Fatalf("frontends:\n%v\nwant\n%v", got, want)
	}
	g.Flush()
	if rec.calls != 1 {
		t.Errorf("passed %d times without a change, want once", rec.calls)
	}
	g.OnUpdates([]Update{{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: "prod", Name: "web-2"}}, {Key: datastore.Key{Kind: KindService, Namespace: "prod", Name: "old"}}})
	g.Flush()
	want = []string{
		"prod/web tcp:80 10.96.0.10 [10.1.0.1:8080]",
		"prod/web tcp:80 fd00:96::10 [[fd00::1]:8080]",
		"prod/web udp:53 10.96.0.10 [10.1.0.1:53]",
		"prod/web udp:53 fd00:96::10 [[fd00::1]:53]",
	}
	if got := rec.frontends(); !slices.Equal(got, want) {
		t.Fatalf("after a slice and a Service went:\n%v\nwant\n%v", got, want)
	}
}

// TestLoadBalancerIncremental: the load balancer rebuilt after each batch
// of random Service and slice changes (only the Services touched) is the
// one a fresh build makes of the same state.
func TestLoadBalancerIncremental(t *testing.T) {
	rec := &lbRecorder{Dataplane: newRecorder()}
	g := NewGraph("node-a", rec)
	rng := rand.New(rand.NewPCG(1, 2))
	ports := []ServicePort{{Proto: "tcp", Port: 8080, Name: "http"}}
	g.OnUpdates([]Update{{Key: datastore.Key{Kind: KindEndpointSlicesSynced}, Value: &EndpointSlice{}}})
	for round := range 200 {
		var ups []Update
		for range 1 + rng.IntN(5) {
			i := rng.IntN(20)
			name := fmt.Sprintf("svc-%d", i)
			switch rng.IntN(5) {
			case 4:
				// A node's address: every backend on it changes.
				n := &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: "node-b"}}
				n.Spec.BGP = &v3.NodeBGPSpec{IPv4Address: fmt.Sprintf("198.18.0.%d/24", 5+rng.IntN(3))}
				ups = append(ups, Update{Key: datastore.Key{Kind: v3.KindNode, Name: "node-b"}, Value: n})
			case 0:
				var v *Service
				if rng.IntN(3) > 0 {
					v = &Service{Type: ServiceNodePort, ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 0, byte(i)})},
						Ports:         []ServiceSpecPort{{Name: "http", Proto: "tcp", Port: uint16(80 + rng.IntN(2)), NodePort: uint16(30000 + i)}},
						InternalLocal: rng.IntN(2) > 0, AffinitySeconds: uint32(rng.IntN(2) * 60)}
				}
				ups = append(ups, Update{Key: datastore.Key{Kind: KindService, Namespace: "ns", Name: name}, Value: v})
			default:
				var v *EndpointSlice
				if rng.IntN(4) > 0 {
					v = &EndpointSlice{Service: name, Ports: ports}
					for j := range rng.IntN(4) {
						// A pod's node is its own whichever slice names it.
						a := byte(j + rng.IntN(3))
						v.Endpoints = append(v.Endpoints, SliceEndpoint{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i), a}),
							Ready: rng.IntN(4) > 0, Serving: true, Terminating: rng.IntN(2) > 0, NodeName: []string{"", "node-a", "node-b"}[a%3]})
					}
				}
				ups = append(ups, Update{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: "ns", Name: fmt.Sprintf("%s-%d", name, rng.IntN(2))}, Value: v})
			}
		}
		g.OnUpdates(ups)
		g.Flush()
		fresh := newLBIndex()
		maps.Copy(fresh.services, g.lb.services)
		want := fresh.build(g.labels.services, lbNodes{hostname: g.hostname, nodes: g.overlay.nodes})
		if rec.lb == nil && len(want.Frontends) == 0 {
			continue
		}
		if rec.lb == nil || !reflect.DeepEqual(rec.lb.Frontends, want.Frontends) || !slices.Equal(rec.lb.Nodes, want.Nodes) {
			for f, fb := range want.Frontends {
				if got := rec.lb.Frontends[f]; !reflect.DeepEqual(got, fb) {
					t.Errorf("%v: incremental %+v, fresh %+v", f, got, fb)
				}
			}
			t.Fatalf("round %d: incremental %v, fresh %v", round, rec.lb, want.Frontends)
		}
	}
}

// TestLoadBalancerExternal: a NodePort Service answers on its node port
// in the families of its cluster addresses, a LoadBalancer one also on
// its load balancer's ingress addresses, every Service on its external
// addresses; each frontend says what it is, carries the traffic
// policies, affinity and Maglev of its Service, and its backends say
// which are this node's (kept apart, ready else terminating, for the
// Local policies) and, for the others, their node's address; a node's
// address changing passes the load balancer again.
func TestLoadBalancerExternal(t *testing.T) {
	rec := &lbRecorder{Dataplane: newRecorder()}
	g := NewGraph("node-a", rec)
	node := func(name, addr string) Update {
		n := &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: name}}
		n.Spec.BGP = &v3.NodeBGPSpec{IPv4Address: addr}
		return Update{Key: datastore.Key{Kind: v3.KindNode, Name: name}, Value: n}
	}
	ep := func(a, node string, ready bool) SliceEndpoint {
		return SliceEndpoint{Addr: netip.MustParseAddr(a), Ready: ready, Serving: true, Terminating: !ready, NodeName: node}
	}
	svc := &Service{Type: ServiceLoadBalancer, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		ExternalIPs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}, LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("198.51.100.8")},
		Ports:         []ServiceSpecPort{{Name: "http", Proto: "tcp", Port: 80, NodePort: 30080}},
		ExternalLocal: true, AffinitySeconds: 60, Maglev: true}
	g.OnUpdates([]Update{
		node("node-a", "198.18.0.1/24"), node("node-b", "198.18.0.5/24"),
		{Key: datastore.Key{Kind: KindService, Namespace: "prod", Name: "web"}, Value: svc},
		{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: "prod", Name: "web-1"}, Value: &EndpointSlice{Service: "web",
			Ports:     []ServicePort{{Proto: "tcp", Port: 8080, Name: "http"}},
			Endpoints: []SliceEndpoint{ep("10.1.0.1", "node-a", false), ep("10.1.1.1", "node-b", true), ep("10.1.1.2", "node-b", true)}}},
		{Key: datastore.Key{Kind: KindEndpointSlicesSynced}, Value: &EndpointSlice{}},
	})
	g.OnInSync()
	g.Flush()
	want := []string{
		"prod/web tcp:30080 0.0.0.0 [10.1.1.1:8080 10.1.1.2:8080]",
		"prod/web tcp:80 10.96.0.10 [10.1.1.1:8080 10.1.1.2:8080]",
		"prod/web tcp:80 198.51.100.7 [10.1.1.1:8080 10.1.1.2:8080]",
		"prod/web tcp:80 198.51.100.8 [10.1.1.1:8080 10.1.1.2:8080]",
	}
	if got := rec.frontends(); !slices.Equal(got, want) {
		t.Fatalf("frontends:\n%v\nwant\n%v", got, want)
	}
	kinds := map[string]FrontendKind{"0.0.0.0": FrontendNodePort, "10.96.0.10": FrontendCluster, "198.51.100.7": FrontendExternal, "198.51.100.8": FrontendExternal}
	for f, fb := range rec.lb.Frontends {
		if fb.Kind != kinds[f.Addr.String()] || !fb.ExternalLocal || fb.InternalLocal || fb.AffinitySeconds != 60 || !fb.Maglev || fb.Group != "prod/web/tcp/http" {
			t.Errorf("frontend %v: %+v", f, fb)
		}
		// This node's only endpoint terminates: it is the local backend
		// though ready ones elsewhere are the cluster's.
		if got := fmt.Sprint(addrPorts(fb.LocalBackends)); got != "[10.1.0.1:8080]" || !fb.LocalBackends[0].Local {
			t.Errorf("frontend %v: local backends %s", f, got)
		}
		for _, b := range fb.Backends {
			if b.Local || b.Node != netip.MustParseAddr("198.18.0.5") {
				t.Errorf("frontend %v: backend %+v, want node-b's at 198.18.0.5", f, b)
			}
		}
	}
	if got := fmt.Sprint(rec.lb.Nodes); got != "[198.18.0.1 198.18.0.5]" {
		t.Errorf("nodes %s", got)
	}
	calls := rec.calls
	g.OnUpdates([]Update{node("node-b", "198.18.0.6/24")})
	g.Flush()
	if rec.calls != calls+1 || rec.lb.Frontends[Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: "tcp"}].Backends[0].Node != netip.MustParseAddr("198.18.0.6") {
		t.Errorf("node-b's new address not passed")
	}
	// A ClusterIP Service has no node port; an IPv6 one's node port is
	// IPv6.
	g.OnUpdates([]Update{{Key: datastore.Key{Kind: KindService, Namespace: "prod", Name: "web"}, Value: &Service{Type: ServiceNodePort,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("fd00:96::10")}, Ports: []ServiceSpecPort{{Name: "http", Proto: "tcp", Port: 80, NodePort: 30080}}}}})
	g.Flush()
	want = []string{"prod/web tcp:30080 :: []", "prod/web tcp:80 fd00:96::10 []"}
	if got := rec.frontends(); !slices.Equal(got, want) {
		t.Fatalf("IPv6 NodePort frontends:\n%v\nwant\n%v", got, want)
	}
}
