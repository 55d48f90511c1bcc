package calc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

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
		out = append(out, fmt.Sprintf("%s %s:%d %s %v", fb.Service, f.Proto, f.Port, f.Addr, fb.Backends))
	}
	slices.Sort(out)
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
			switch rng.IntN(4) {
			case 0:
				var v *Service
				if rng.IntN(3) > 0 {
					v = &Service{ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 0, byte(i)})}, Ports: []ServiceSpecPort{{Name: "http", Proto: "tcp", Port: uint16(80 + rng.IntN(2))}}}
				}
				ups = append(ups, Update{Key: datastore.Key{Kind: KindService, Namespace: "ns", Name: name}, Value: v})
			default:
				var v *EndpointSlice
				if rng.IntN(4) > 0 {
					v = &EndpointSlice{Service: name, Ports: ports}
					for j := range rng.IntN(4) {
						v.Endpoints = append(v.Endpoints, SliceEndpoint{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i), byte(j + rng.IntN(3))}), Ready: true, Serving: true})
					}
				}
				ups = append(ups, Update{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: "ns", Name: fmt.Sprintf("%s-%d", name, rng.IntN(2))}, Value: v})
			}
		}
		g.OnUpdates(ups)
		g.Flush()
		fresh := newLBIndex()
		maps.Copy(fresh.services, g.lb.services)
		want := fresh.build(g.labels.services)
		if rec.lb == nil && len(want.Frontends) == 0 {
			continue
		}
		if rec.lb == nil || !maps.EqualFunc(rec.lb.Frontends, want.Frontends, func(a, b FrontendBackends) bool {
			return a.Service == b.Service && slices.Equal(a.Backends, b.Backends)
		}) {
			t.Fatalf("round %d: incremental %v, fresh %v", round, rec.lb, want.Frontends)
		}
	}
}
