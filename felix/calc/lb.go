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

// Service types, as Kubernetes names them (an ExternalName Service has
// no addresses and is not load-balanced).
const (
	ServiceClusterIP    = "ClusterIP"
	ServiceNodePort     = "NodePort"
	ServiceLoadBalancer = "LoadBalancer"
)

// DefaultAffinitySeconds is Kubernetes' sessionAffinityConfig.clientIP
// timeoutSeconds default (3 hours).
const DefaultAffinitySeconds = 10800

// Service is what the load balancer needs of a Kubernetes Service.
type Service struct {
	v3.TypeMeta
	v3.ObjectMeta
	// Type is ClusterIP (also for an empty type), NodePort or
	// LoadBalancer.
	Type string
	// ClusterIPs are its cluster addresses (none for a headless or an
	// ExternalName Service).
	ClusterIPs []netip.Addr
	// ExternalIPs are spec.externalIPs; LoadBalancerIPs the addresses of
	// status.loadBalancer.ingress (type LoadBalancer).
	ExternalIPs, LoadBalancerIPs []netip.Addr
	Ports                        []ServiceSpecPort
	// ExternalLocal is externalTrafficPolicy Local: traffic from outside
	// the node to a node port, load balancer or external address goes to
	// this node's endpoints only (none: dropped), its source kept.
	ExternalLocal bool
	// InternalLocal is internalTrafficPolicy Local: traffic from the
	// node's workloads to a cluster address goes to this node's
	// endpoints only (none: dropped).
	InternalLocal bool
	// AffinitySeconds is sessionAffinity ClientIP's timeout (0: no
	// affinity).
	AffinitySeconds uint32
	// Maglev is the annotation lb.projectcalico.org/external-traffic-strategy:
	// maglev (Calico's): traffic from outside to its load balancer and
	// external addresses gets a backend by consistent hashing.
	Maglev bool
}

// ServiceSpecPort is one port of a Service: its name (matching the
// EndpointSlices' port names, which carry the target port resolved per
// pod, named target ports included), protocol, port and node port (0:
// none).
type ServiceSpecPort struct {
	Name     string
	Proto    string // "tcp", "udp" or "sctp"
	Port     uint16
	NodePort uint16
}

// SliceEndpoint is one endpoint of an EndpointSlice with its conditions.
type SliceEndpoint struct {
	Addr netip.Addr
	// Ready, Serving and Terminating are the endpoint's conditions (an
	// absent ready or serving counts as true, as the API says).
	Ready, Serving, Terminating bool
	// NodeName is the node that hosts it ("" when the slice does not
	// say).
	NodeName string
}

// The node port frontends' addresses: a node port answers on every
// address of the node (and of the family), which these stand for.
var (
	NodePortAddr4 = netip.IPv4Unspecified()
	NodePortAddr6 = netip.IPv6Unspecified()
)

// Frontend is one address, port and protocol a Service answers on (a node
// port: NodePortAddr4 or NodePortAddr6).
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto string
}

// FrontendKind is what a frontend is, which decides the traffic policy
// that applies to it.
type FrontendKind uint8

const (
	// FrontendCluster is a cluster address.
	FrontendCluster FrontendKind = iota
	// FrontendExternal is a load balancer or an external address.
	FrontendExternal
	// FrontendNodePort is a node port.
	FrontendNodePort
)

// Backend is one backend of a frontend.
type Backend struct {
	netip.AddrPort
	// Local: the endpoint is on this node.
	Local bool
	// Node is the address (of the frontend's family) of the node that
	// hosts a remote endpoint, when known: where traffic from outside
	// is tunnelled to (bpfExternalServiceMode).
	Node netip.Addr
}

// FrontendBackends are a frontend's Service ("namespace/name"), what it
// is and the backends it balances over.
type FrontendBackends struct {
	Service string
	// Group names the Service port ("namespace/name/proto/port name"):
	// the frontends of one port share their clients' affinity.
	Group string
	Kind  FrontendKind
	// Backends are the ready endpoints, else the serving ones that
	// terminate (as kube-proxy), sorted; none: the frontend rejects.
	Backends []Backend
	// LocalBackends are this node's endpoints the same way (ready, else
	// serving and terminating), for the Local traffic policies.
	LocalBackends []Backend
	// ExternalLocal and InternalLocal are the Service's traffic
	// policies (Service).
	ExternalLocal, InternalLocal bool
	AffinitySeconds              uint32
	Maglev                       bool
}

// LoadBalancer is every frontend felix load-balances and its backends.
type LoadBalancer struct {
	Frontends map[Frontend]FrontendBackends
	// Nodes are every node's own addresses: the peers of the node port
	// tunnel.
	Nodes []netip.Addr
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
// touched (a node with thousands of Services); a change of the nodes
// (this node's name, their addresses: the backends' nodes) rebuilds them
// all.
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
	// hostname and nodes are the nodes of the last build.
	hostname string
	nodes    map[string]overlayNode
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

// lbNodes is what the load balancer needs of the nodes: this node's name
// and every node's addresses.
type lbNodes struct {
	hostname string
	nodes    map[string]overlayNode
}

// nodeAddr is the address of the family of a (hosting) node, if known.
func (n lbNodes) nodeAddr(name string, v6 bool) netip.Addr {
	on, ok := n.nodes[name]
	if !ok {
		return netip.Addr{}
	}
	if v6 {
		return on.addr6.Addr()
	}
	return on.addr4.Addr()
}

// build makes the load balancer from the Services and the slices,
// rebuilding the frontends of the Services that changed (all of them the
// first time, and when the nodes changed).
func (x *lbIndex) build(slicesIdx *serviceIndex, nodes lbNodes) *LoadBalancer {
	lb := &LoadBalancer{}
	for _, name := range slices.Sorted(maps.Keys(nodes.nodes)) {
		n := nodes.nodes[name]
		for _, p := range []netip.Prefix{n.addr4, n.addr6} {
			if p.IsValid() {
				lb.Nodes = append(lb.Nodes, p.Addr())
			}
		}
	}
	changed := x.changed
	if x.frontends == nil || nodes.hostname != x.hostname || !maps.Equal(nodes.nodes, x.nodes) {
		x.frontends = map[Frontend]FrontendBackends{}
		x.byService = map[string][]Frontend{}
		changed = map[string]struct{}{}
		for key := range x.services {
			changed[key] = struct{}{}
		}
		x.hostname, x.nodes = nodes.hostname, maps.Clone(nodes.nodes)
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
			for f, fb := range serviceFrontends(key, svc, slicesIdx, nodes) {
				x.frontends[f] = fb
				x.byService[key] = append(x.byService[key], f)
			}
		}
	}
	clear(x.changed)
	clear(slicesIdx.lbChanged)
	lb.Frontends = maps.Clone(x.frontends)
	return lb
}

// serviceFrontends are a Service's frontends: for every cluster, external
// and load balancer address, and node port, of every port, the slices'
// endpoints of the address's family on the port of the same name and
// protocol. Ready endpoints are the backends; when none is ready, the
// serving ones that terminate (as kube-proxy), for the whole cluster and
// for this node apart.
func serviceFrontends(key string, svc *Service, slicesIdx *serviceIndex, nodes lbNodes) map[Frontend]FrontendBackends {
	out := map[Frontend]FrontendBackends{}
	for _, p := range svc.Ports {
		proto := strings.ToLower(p.Proto)
		var fam [2]struct{ all, local []Backend }
		for _, v6 := range []bool{false, true} {
			f := &fam[b2i(v6)]
			f.all, f.local = backendsOf(slicesIdx, key, p, v6, nodes)
		}
		add := func(a netip.Addr, port uint16, kind FrontendKind) {
			f := &fam[b2i(a.Is6())]
			out[Frontend{Addr: a, Port: port, Proto: proto}] = FrontendBackends{
				Service: key, Group: key + "/" + proto + "/" + p.Name, Kind: kind,
				Backends: f.all, LocalBackends: f.local,
				ExternalLocal: svc.ExternalLocal, InternalLocal: svc.InternalLocal,
				AffinitySeconds: svc.AffinitySeconds, Maglev: svc.Maglev,
			}
		}
		for _, ip := range svc.ClusterIPs {
			add(ip, p.Port, FrontendCluster)
		}
		for _, ip := range svc.ExternalIPs {
			add(ip, p.Port, FrontendExternal)
		}
		if svc.Type == ServiceLoadBalancer {
			for _, ip := range svc.LoadBalancerIPs {
				add(ip, p.Port, FrontendExternal)
			}
		}
		if p.NodePort != 0 && (svc.Type == ServiceNodePort || svc.Type == ServiceLoadBalancer) {
			// A node port answers in the families of the Service's
			// cluster addresses (both when it has none).
			v4, v6 := len(svc.ClusterIPs) == 0, len(svc.ClusterIPs) == 0
			for _, ip := range svc.ClusterIPs {
				v4, v6 = v4 || ip.Is4(), v6 || ip.Is6()
			}
			if v4 {
				add(NodePortAddr4, p.NodePort, FrontendNodePort)
			}
			if v6 {
				add(NodePortAddr6, p.NodePort, FrontendNodePort)
			}
		}
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// backendsOf are a Service port's backends of one family, cluster-wide
// and on this node.
func backendsOf(slicesIdx *serviceIndex, svc string, p ServiceSpecPort, v6 bool, nodes lbNodes) (all, local []Backend) {
	var ready, terminating, localReady, localTerminating []Backend
	for sk := range slicesIdx.bySvc[svc] {
		s := slicesIdx.slices[sk]
		for _, sp := range s.Ports {
			if sp.Name != p.Name || sp.Proto != p.Proto {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Addr.Is6() != v6 {
					continue
				}
				b := Backend{AddrPort: netip.AddrPortFrom(e.Addr, sp.Port), Local: e.NodeName != "" && e.NodeName == nodes.hostname}
				if !b.Local && e.NodeName != "" {
					b.Node = nodes.nodeAddr(e.NodeName, v6)
				}
				switch {
				case e.Ready:
					ready = append(ready, b)
					if b.Local {
						localReady = append(localReady, b)
					}
				case e.Serving && e.Terminating:
					terminating = append(terminating, b)
					if b.Local {
						localTerminating = append(localTerminating, b)
					}
				}
			}
		}
	}
	pick := func(r, t []Backend) []Backend {
		if len(r) == 0 {
			r = t
		}
		slices.SortFunc(r, func(a, b Backend) int { return a.AddrPort.Compare(b.AddrPort) })
		return slices.CompactFunc(r, func(a, b Backend) bool { return a.AddrPort == b.AddrPort })
	}
	return pick(ready, terminating), pick(localReady, localTerminating)
}

// flushLB passes the load balancer when a Service, a slice or a node's
// address changed, once the slices were read (before, a Service would
// reject for want of its endpoints).
func (g *Graph) flushLB() {
	sd, ok := g.dp.(ServiceDataplane)
	if !ok || !g.labels.services.synced {
		return
	}
	if !g.lb.dirty && !g.labels.services.lbDirty {
		return
	}
	g.lb.dirty, g.labels.services.lbDirty = false, false
	sd.OnLoadBalancerUpdate(g.lb.build(g.labels.services, lbNodes{hostname: g.hostname, nodes: g.overlay.nodes}))
}
