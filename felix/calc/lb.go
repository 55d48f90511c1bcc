package calc

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// KindService is the kind of the Kubernetes Services felix reads from the
// Kubernetes API (Updates whose Value is a *Service; nil when it was
// deleted): with the EndpointSlices they are what the eBPF dataplane
// load-balances (LoadBalancer).
const KindService = "Service"

// Service is what the load balancer needs of a Kubernetes Service.
type Service struct {
	v3.TypeMeta
	v3.ObjectMeta
	// ClusterIPs are its cluster addresses (none for a headless or an
	// ExternalName Service).
	ClusterIPs []netip.Addr
	Ports      []ServiceSpecPort
}

// ServiceSpecPort is one port of a Service: its name (matching the
// EndpointSlices' port names, which carry the target port resolved per
// pod, named target ports included), protocol and port.
type ServiceSpecPort struct {
	Name  string
	Proto string // "tcp", "udp" or "sctp"
	Port  uint16
}

// SliceEndpoint is one endpoint of an EndpointSlice with its conditions.
type SliceEndpoint struct {
	Addr netip.Addr
	// Ready, Serving and Terminating are the endpoint's conditions (an
	// absent ready or serving counts as true, as the API says).
	Ready, Serving, Terminating bool
}

// Frontend is one address, port and protocol a Service answers on.
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto string
}

// FrontendBackends are a frontend's Service ("namespace/name") and the
// backends it balances over, sorted (none: the frontend rejects).
type FrontendBackends struct {
	Service  string
	Backends []netip.AddrPort
}

// LoadBalancer is every frontend felix load-balances and its backends.
type LoadBalancer struct {
	Frontends map[Frontend]FrontendBackends
}

// ServiceDataplane is implemented by a dataplane that load-balances
// Services itself (the eBPF one): it is given the whole LoadBalancer
// whenever a Service or one of its EndpointSlices changed, once the
// EndpointSlices were read.
type ServiceDataplane interface {
	OnLoadBalancerUpdate(lb *LoadBalancer)
}

// lbIndex is the stage that keeps the Services, for the load balancer;
// their endpoints are the serviceIndex's slices.
type lbIndex struct {
	services map[string]*Service // by "namespace/name"
	dirty    bool
}

func newLBIndex() *lbIndex { return &lbIndex{services: map[string]*Service{}} }

func (x *lbIndex) onService(namespace, name string, s *Service) {
	key := namespace + "/" + name
	if s == nil {
		delete(x.services, key)
	} else {
		x.services[key] = s
	}
	x.dirty = true
}

// build makes the load balancer from the Services and the slices: for
// every cluster address and port of a Service, the slices' endpoints of
// the address's family on the port of the same name and protocol. Ready
// endpoints are the backends; when none is ready, the serving ones that
// terminate (as kube-proxy).
func (x *lbIndex) build(slicesIdx *serviceIndex) *LoadBalancer {
	lb := &LoadBalancer{Frontends: map[Frontend]FrontendBackends{}}
	for _, key := range slices.Sorted(maps.Keys(x.services)) {
		svc := x.services[key]
		for _, ip := range svc.ClusterIPs {
			for _, p := range svc.Ports {
				var ready, terminating []netip.AddrPort
				for sk := range slicesIdx.bySvc[key] {
					s := slicesIdx.slices[sk]
					for _, sp := range s.Ports {
						if sp.Name != p.Name || sp.Proto != p.Proto {
							continue
						}
						for _, e := range s.Endpoints {
							if e.Addr.Is4() != ip.Is4() {
								continue
							}
							ap := netip.AddrPortFrom(e.Addr, sp.Port)
							if e.Ready {
								ready = append(ready, ap)
							} else if e.Serving && e.Terminating {
								terminating = append(terminating, ap)
							}
						}
					}
				}
				be := ready
				if len(be) == 0 {
					be = terminating
				}
				slices.SortFunc(be, func(a, b netip.AddrPort) int { return a.Compare(b) })
				be = slices.Compact(be)
				lb.Frontends[Frontend{Addr: ip, Port: p.Port, Proto: strings.ToLower(p.Proto)}] = FrontendBackends{Service: key, Backends: be}
			}
		}
	}
	return lb
}

// flushLB passes the load balancer when a Service or a slice changed,
// once the slices were read (before, a Service would reject for want of
// its endpoints).
func (g *Graph) flushLB() {
	sd, ok := g.dp.(ServiceDataplane)
	if !ok || !g.labels.services.synced {
		return
	}
	if !g.lb.dirty && !g.labels.services.lbDirty {
		return
	}
	g.lb.dirty, g.labels.services.lbDirty = false, false
	sd.OnLoadBalancerUpdate(g.lb.build(g.labels.services))
}
