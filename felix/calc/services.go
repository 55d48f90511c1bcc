package calc

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// KindEndpointSlice is the kind of the Kubernetes EndpointSlices felix
// reads from the Kubernetes API (Updates whose Value is an
// *EndpointSlice, Key.Namespace and Key.Name the slice's; nil when it was
// deleted). They fill the IP sets of rules that name a Service
// (source.services, destination.services).
const KindEndpointSlice = "EndpointSlice"

// KindEndpointSlicesSynced is the kind of the one Update (Value
// *EndpointSlice, empty) the EndpointSlice source sends once its first
// complete list was delivered. Until then a rule naming a Service fails
// closed as one felix cannot enforce: its sets would be incomplete.
const KindEndpointSlicesSynced = "EndpointSlicesSynced"

// EndpointSlice is what the service index needs of a Kubernetes
// EndpointSlice: the Service it belongs to (its kubernetes.io/service-name
// label), its endpoints' addresses and its ports.
type EndpointSlice struct {
	v3.TypeMeta
	v3.ObjectMeta
	// Service is the name of the Service, in the slice's namespace.
	Service   string
	Addresses []netip.Addr
	Ports     []ServicePort
	// Endpoints are the addresses with their conditions, for the load
	// balancer (lb.go).
	Endpoints []SliceEndpoint
}

// ServicePort is one port of an EndpointSlice.
type ServicePort struct {
	// Proto is "tcp", "udp" or "sctp".
	Proto string
	Port  uint16
	// Name is the port's name (that of the Service port it serves).
	Name string
}

// serviceIndex is the stage that keeps the endpoints of every Service
// (by "namespace/name") from its EndpointSlices, and fills the IP sets of
// rules naming a Service: a source set holds the endpoints' addresses, a
// destination set each address with each port of its slice
// (hash:ip,port), as Calico's.
type serviceIndex struct {
	// slices by "namespace/slice"; bySvc the slice keys of a Service.
	slices map[string]*EndpointSlice
	bySvc  map[string]map[string]struct{}
	// synced says the source has listed every slice.
	synced bool
	// dirty are the Services whose slices changed since the last sync.
	dirty map[string]struct{}
	// lbDirty: a slice changed since the load balancer was last passed;
	// lbChanged: the Services of those slices.
	lbDirty   bool
	lbChanged map[string]struct{}
}

func newServiceIndex() *serviceIndex {
	return &serviceIndex{slices: map[string]*EndpointSlice{}, bySvc: map[string]map[string]struct{}{}, dirty: map[string]struct{}{}, lbChanged: map[string]struct{}{}}
}

// onSlice adds, replaces or (nil) removes a slice.
func (x *serviceIndex) onSlice(namespace, name string, s *EndpointSlice) {
	key := namespace + "/" + name
	x.lbDirty = true
	if old := x.slices[key]; old != nil {
		svc := namespace + "/" + old.Service
		delete(x.bySvc[svc], key)
		if len(x.bySvc[svc]) == 0 {
			delete(x.bySvc, svc)
		}
		x.dirty[svc] = struct{}{}
		x.lbChanged[svc] = struct{}{}
		delete(x.slices, key)
	}
	if s == nil || s.Service == "" {
		return
	}
	svc := namespace + "/" + s.Service
	x.slices[key] = s
	if x.bySvc[svc] == nil {
		x.bySvc[svc] = map[string]struct{}{}
	}
	x.bySvc[svc][key] = struct{}{}
	x.dirty[svc] = struct{}{}
	x.lbChanged[svc] = struct{}{}
}

// members returns the members of a set of svc: addresses, or with ports
// each address of a slice with each of that slice's ports.
func (x *serviceIndex) members(svc string, ports bool) map[string]struct{} {
	out := map[string]struct{}{}
	for key := range x.bySvc[svc] {
		s := x.slices[key]
		for _, a := range s.Addresses {
			if !ports {
				out[a.String()] = struct{}{}
				continue
			}
			for _, p := range s.Ports {
				out[a.String()+","+p.Proto+":"+strconv.Itoa(int(p.Port))] = struct{}{}
			}
		}
	}
	return out
}

// fillService makes a service set's members what the index holds.
func (x *labelIndex) fillService(s *ipSetState) {
	want := x.services.members(s.spec.service, s.spec.svcPorts)
	for m := range s.members {
		if _, ok := want[m]; !ok {
			x.removeMember(s, m)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(want)) {
		if _, ok := s.members[m]; !ok {
			x.addMember(s, m)
		}
	}
}

// syncServices refills the sets of the Services whose slices changed.
func (x *labelIndex) syncServices() {
	if len(x.services.dirty) == 0 {
		return
	}
	for svc := range x.services.dirty {
		for s := range x.svcSets[svc] {
			if !s.pending {
				x.fillService(s)
			}
		}
	}
	clear(x.services.dirty)
}
