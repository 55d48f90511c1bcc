package calc

import (
	"net/netip"
	"strconv"
)

// ServiceTranslation is what the load balancer of the eBPF dataplane
// does with a packet to a Service address (a cluster, external or load
// balancer address, or a node port on a node's address): the frontend,
// the backends it chooses among (ready endpoints, else the serving ones
// that terminate), and the one the explanation judged the packet on, as
// felix's policy sees the backend, not the Service address.
type ServiceTranslation struct {
	Service  string `json:"service"`
	Frontend string `json:"frontend"`
	// Kind is "cluster", "external" or "nodePort".
	Kind string `json:"kind"`
	// Backends are the candidates (none: the frontend is refused).
	Backends []string `json:"backends"`
	// Backend is the candidate judged ("" when there is none).
	Backend string `json:"backend,omitempty"`
}

var frontendKinds = map[FrontendKind]string{FrontendCluster: "cluster", FrontendExternal: "external", FrontendNodePort: "nodePort"}

// translateService finds the frontend of a packet to dst:port of proto,
// when the graph knows the Services (a node's live graph; the datastore
// has none): its exact address and port, else a node port on one of the
// nodes' addresses. ok is false for an address that is no frontend.
func (g *Graph) translateService(dst netip.Addr, port uint16, proto uint8) (*ServiceTranslation, netip.AddrPort, bool) {
	name := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[proto]
	if name == "" || !g.labels.services.synced || port == 0 {
		return nil, netip.AddrPort{}, false
	}
	lb := g.lb.build(g.labels.services, lbNodes{hostname: g.hostname, nodes: g.overlay.nodes})
	f := Frontend{Addr: dst, Port: port, Proto: name}
	fb, ok := lb.Frontends[f]
	if !ok {
		wild := NodePortAddr4
		if dst.Is6() {
			wild = NodePortAddr6
		}
		node := false
		for _, a := range lb.Nodes {
			node = node || a == dst
		}
		if fb, ok = lb.Frontends[Frontend{Addr: wild, Port: port, Proto: name}]; !ok || !node {
			return nil, netip.AddrPort{}, false
		}
	}
	t := &ServiceTranslation{Service: fb.Service, Frontend: netip.AddrPortFrom(dst, port).String() + "/" + name, Kind: frontendKinds[fb.Kind]}
	for _, b := range fb.Backends {
		t.Backends = append(t.Backends, b.AddrPort.String())
	}
	if len(fb.Backends) == 0 {
		return t, netip.AddrPort{}, true
	}
	t.Backend = t.Backends[0]
	return t, fb.Backends[0].AddrPort, true
}

// serviceNote says how the translation was explained.
func serviceNote(t *ServiceTranslation) string {
	if t.Backend == "" {
		return "Service " + t.Service + " has no endpoints: the eBPF dataplane refuses the packet (ICMP port unreachable)"
	}
	n := len(t.Backends)
	if n == 1 {
		return "the packet to Service " + t.Service + " (" + t.Frontend + ") is judged on its one backend " + t.Backend
	}
	return "the packet to Service " + t.Service + " (" + t.Frontend + ") is judged on " + t.Backend + ", the first of its " +
		strconv.Itoa(n) + " backends (each new connection gets one: explain --to another to judge it)"
}
