package calc

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// resolve finds an end named by endpoint; an address is classified later
// (classify), once both families are known.
func (x *explainer) resolve(e End, other End, flag string) (*endRef, error) {
	items := x.g.labels.items
	switch {
	case e.Address != "":
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return nil, badQuery("%s %q: not an IP address", flag, e.Address)
		}
		return &endRef{addr: a.Unmap()}, nil
	case e.Namespace != "":
		if it := items[itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace, Name: e.Name})]; it != nil {
			return x.endpointEnd(itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace, Name: e.Name}), it), nil
		}
		prefix := itemKey(datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: e.Namespace})
		var keys []string
		for _, it := range x.g.labels.pods[e.Namespace+"/"+e.Name] {
			keys = append(keys, it.key)
		}
		switch len(keys) {
		case 0:
			return nil, badQuery("%s %s: no pod %q (nor WorkloadEndpoint of that name) in namespace %q", flag, e, e.Name, e.Namespace)
		case 1:
			return x.endpointEnd(keys[0], items[keys[0]]), nil
		}
		slices.Sort(keys)
		var names []string
		for _, k := range keys {
			names = append(names, e.Namespace+"/"+k[len(prefix):])
		}
		return nil, badQuery("%s %s: pod %q has %d WorkloadEndpoints (%s): name one", flag, e, e.Name, len(keys), strings.Join(names, ", "))
	case e.Name != "":
		key := itemKey(datastore.Key{Kind: v3.KindHostEndpoint, Name: e.Name})
		if it := items[key]; it != nil {
			return x.endpointEnd(key, it), nil
		}
		return nil, badQuery("%s %s: no HostEndpoint %q (name a pod or WorkloadEndpoint as namespace/name)", flag, e, e.Name)
	}
	return nil, badQuery("%s: nothing named", flag)
}

// endpointEnd is an end that is an endpoint.
func (x *explainer) endpointEnd(key string, it *item) *endRef {
	e := &endRef{it: it, key: key}
	parts := strings.SplitN(key, "/", 3)
	e.peer = Peer{Name: parts[2], Node: it.node, Interface: it.iface, Labels: maps.Clone(it.labels)}
	if it.kind == itemWorkload {
		e.peer.Kind, e.peer.Namespace, e.peer.Pod = PeerWorkload, it.ns, it.pod
	} else {
		e.peer.Kind = PeerHostEP
	}
	return e
}

// pickAddrs gives endpoint ends their address: of the family both ends
// have (IPv4 first).
func (x *explainer) pickAddrs(from, to *endRef, q Query) error {
	families := func(e *endRef) []int {
		if e.it == nil {
			if e.addr.Is4() {
				return []int{4}
			}
			return []int{6}
		}
		var fs []int
		for _, n := range e.it.nets {
			f := 6
			if n.Addr().Is4() {
				f = 4
			}
			if !slices.Contains(fs, f) {
				fs = append(fs, f)
			}
		}
		slices.Sort(fs)
		return fs
	}
	ff, tf := families(from), families(to)
	fam := 0
	for _, f := range ff {
		if slices.Contains(tf, f) {
			fam = f
			break
		}
	}
	if fam == 0 {
		return badQuery("%s and %s have no IP version in common (%v, %v)", q.From, q.To, ff, tf)
	}
	for _, e := range []*endRef{from, to} {
		if e.it == nil {
			continue
		}
		for _, n := range e.it.nets {
			if n.Addr().Is4() == (fam == 4) {
				e.addr = n.Addr()
				break
			}
		}
		e.peer.Address = e.addr.String()
	}
	return nil
}

// classify finds what an address end is: the endpoint holding it, a
// node's host, or outside the cluster. An address in an IP pool that no
// endpoint holds is an error: policy cannot be explained for a pod that
// is not there.
func (x *explainer) classify(e *endRef, q Query, flag string) error {
	if e.it != nil {
		return nil
	}
	var keys []string
	for _, it := range x.g.labels.holders(e.addr) {
		if it.kind != itemNetworkSet {
			keys = append(keys, it.key)
		}
	}
	slices.Sort(keys)
	switch len(keys) {
	case 1:
		addr := e.addr
		*e = *x.endpointEnd(keys[0], x.g.labels.items[keys[0]])
		e.addr, e.peer.Address = addr, addr.String()
		return nil
	case 0:
	default:
		var names []string
		for _, k := range keys {
			kind, rest, _ := strings.Cut(k, "/")
			names = append(names, kind+" "+strings.TrimPrefix(rest, "/"))
		}
		return badQuery("%s %s: held by %d endpoints (%s): name one", flag, e.addr, len(keys), strings.Join(names, ", "))
	}
	e.peer.Address = e.addr.String()
	if node, ok := q.Hosts[e.addr.String()]; ok {
		e.peer.Kind, e.peer.Node = PeerHost, node
		e.hostEP = x.starHostEndpoint(node)
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(x.g.pools)) {
		pool := x.g.pools[name]
		if p, err := ParseNet(pool.CIDR); err == nil && p.Contains(e.addr) {
			return badQuery("%s %s: in IP pool %s (%s), but no endpoint holds it", flag, e.addr, name, pool.CIDR)
		}
	}
	e.peer.Kind = PeerExternal
	return nil
}

// starHostEndpoint is the host endpoint of every interface ("*") of a
// node, or nil.
func (x *explainer) starHostEndpoint(node string) *item {
	var found *item
	for it := range x.g.labels.hosts {
		if it.node == node && it.iface == "*" && (found == nil || it.key < found.key) {
			found = it
		}
	}
	return found
}

// namedHostEndpoints lists a node's host endpoints that name one
// interface (their interfaces are not known to be on the packet's path)
// and have policy that relevant says would matter.
func (x *explainer) namedHostEndpoints(node string, except *item, relevant func(*Endpoint) bool) []string {
	var out []string
	for it := range x.g.labels.hosts {
		if it.node == node && it.iface != "*" && it != except && relevant(x.endpoint(it)) {
			out = append(out, x.keyName(it)+" ("+cmp.Or(it.iface, "named by expectedIPs")+")")
		}
	}
	slices.Sort(out)
	return out
}

// findHolders lists the items holding each address.
func (x *explainer) findHolders(addrs ...netip.Addr) {
	x.holders = map[netip.Addr][]*item{}
	for _, a := range addrs {
		x.holders[a] = x.g.labels.holders(a)
	}
}
