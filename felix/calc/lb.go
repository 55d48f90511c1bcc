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
// their endpoints are the serviceIndex's slices. It keeps each Service's
// frontends as last built, so a change rebuilds only the Services it
// touched (a node with thousands of Services).
type lbIndex struct {
	services map[string]*Service // by "namespace/name"
	dirty    bool
	// changed are the Services whose Service changed since the last
	// build (their slices' changes are the serviceIndex's lbChanged).
	changed map[string]struct{}
	// byService are each Service's frontends as last built, frontends
	// all of them (nil before the first build).
	byService map[string][]Frontend
	frontends map[Frontend]FrontendBackends
}

func newLBIndex() *lbIndex {
	return &lbIndex{services: map[string]*Service{}, changed: map[string]struct{}{}, byService: map[string][]Frontend{}}
}

func (x *lbIndex) onService(namespace, name string, s *Service) {
	key := namespace + "/" + name
	if s == nil {
		delete(x.services, key)
	} else {
		x.services[key] = s
	}
	x.changed[key] = struct{}{}
	x.dirty = true
}

// build makes the load balancer from the Services and the slices,
// rebuilding the frontends of the Services that changed (all of them the
// first time).
func (x *lbIndex) build(slicesIdx *serviceIndex) *LoadBalancer {
	changed := x.changed
	if x.frontends == nil {
		x.frontends = map[Frontend]FrontendBackends{}
		changed = map[string]struct{}{}
		for key := range x.services {
			changed[key] = struct{}{}
		}
	}
	for key := range slicesIdx.lbChanged {
		changed[key] = struct{}{}
	}
	for key := range changed {
		for _, f := range x.byService[key] {
			delete(x.frontends, f)
		}
		delete(x.byService, key)
		if svc := x.services[key]; svc != nil {
			for f, fb := range serviceFrontends(key, svc, slicesIdx) {
				x.frontends[f] = fb
				x.byService[key] = append(x.byService[key], f)
			}
		}
	}
	clear(x.changed)
	clear(slicesIdx.lbChanged)
	return &LoadBalancer{Frontends: maps.Clone(x.frontends)}
}

// serviceFrontends are a Service's frontends: for every cluster address
// and port, the slices' endpoints of the address's family on the port of
// the same name and protocol. Ready endpoints are the backends; when none
// is ready, the serving ones that terminate (as kube-proxy).
func serviceFrontends(key string, svc *Service, slicesIdx *serviceIndex) map[Frontend]FrontendBackends {
	out := map[Frontend]FrontendBackends{}
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
			out[Frontend{Addr: ip, Port: p.Port, Proto: strings.ToLower(p.Proto)}] = FrontendBackends{Service: key, Backends: be}
		}
	}
	return out
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
