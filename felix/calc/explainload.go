package calc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// This file reads from the datastore what an explanation needs, into an
// explaining graph (NewExplainGraph). A cluster has few policies, tiers,
// profiles, host endpoints and network sets, and may have hundreds of
// thousands of WorkloadEndpoints: those are read only for the packet's
// ends.

// LoadExplain reads what explaining q needs: every Tier,
// GlobalNetworkPolicy, Profile, HostEndpoint, NetworkSet,
// GlobalNetworkSet, IPPool, FelixConfiguration and Node; the
// NetworkPolicies of the namespaces the ends are in; and the
// WorkloadEndpoints of the ends — by name, or for an address through the
// IPAM allocation that holds it (the namespace its pod is in), else by
// reading every WorkloadEndpoint. It returns the graph and q with Hosts
// filled from the Nodes. A WorkloadEndpoint of another namespace that
// claims the same address as an end is not seen (IPAM hands an address
// to one pod); LoadCluster reads everything.
func LoadExplain(ctx context.Context, store datastore.Interface, kv datastore.KV, q Query) (*Graph, Query, error) {
	l := &loader{store: store, kv: kv, g: NewExplainGraph(), codec: datastore.NewCodec()}
	kinds := []string{v3.KindFelixConfiguration, v3.KindIPPool, v3.KindTier, v3.KindProfile, v3.KindGlobalNetworkPolicy,
		v3.KindGlobalNetworkSet, v3.KindNetworkSet, v3.KindHostEndpoint, v3.KindNode}
	var wg sync.WaitGroup
	errs := make([]error, len(kinds)+2)
	lists := make([][]v3.Resource, len(kinds))
	for i, k := range kinds {
		wg.Go(func() { lists[i], errs[i] = l.list(ctx, datastore.ListOptions{Kind: k}) })
	}
	var ends [2][]v3.Resource
	for i, e := range []End{q.From, q.To} {
		wg.Go(func() { ends[i], errs[len(kinds)+i] = l.endpoints(ctx, e) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, q, err
	}
	// The NetworkPolicies of the ends' namespaces (a NetworkPolicy
	// selects only endpoints of its own namespace).
	namespaces := map[string]bool{}
	for _, rs := range ends {
		for _, r := range rs {
			namespaces[r.GetObjectMeta().Namespace] = true
		}
	}
	var nps []v3.Resource
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		rs, err := l.list(ctx, datastore.ListOptions{Kind: v3.KindNetworkPolicy, Namespace: ns})
		if err != nil {
			return nil, q, err
		}
		nps = append(nps, rs...)
	}
	for i, k := range kinds {
		if k == v3.KindNode {
			q.Hosts = HostAddresses(lists[i], q.Hosts)
			continue
		}
		l.feed(lists[i])
	}
	l.feed(nps)
	l.feed(ends[0])
	l.feed(ends[1])
	return l.g, q, nil
}

// LoadCluster reads every kind felix reads, and the Nodes' addresses,
// into an explaining graph: slower than LoadExplain on a large cluster,
// but it sees every endpoint, for many explanations at once.
func LoadCluster(ctx context.Context, store datastore.Interface) (*Graph, map[string]string, error) {
	l := &loader{store: store, g: NewExplainGraph()}
	kinds := append(SyncedKinds(), v3.KindNode)
	lists := make([][]v3.Resource, len(kinds))
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() { lists[i], errs[i] = l.list(ctx, datastore.ListOptions{Kind: k}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	var hosts map[string]string
	for i, k := range kinds {
		if k == v3.KindNode {
			hosts = HostAddresses(lists[i], nil)
			continue
		}
		l.feed(lists[i])
	}
	return l.g, hosts, nil
}

type loader struct {
	store datastore.Interface
	kv    datastore.KV
	g     *Graph
	codec *datastore.Codec
}

func (l *loader) list(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, error) {
	rs, _, err := l.store.List(ctx, opts)
	if err != nil {
		what := opts.Kind
		if opts.Namespace != "" {
			what += " in namespace " + opts.Namespace
		}
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return rs, nil
}

func (l *loader) feed(rs []v3.Resource) {
	for _, r := range rs {
		l.g.OnUpdate(Update{Key: datastore.KeyOf(r), Value: r})
	}
}

// endpoints reads the WorkloadEndpoints an end may be.
func (l *loader) endpoints(ctx context.Context, e End) ([]v3.Resource, error) {
	switch {
	case e.Address != "":
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return nil, nil // Explain says what is wrong with it.
		}
		a = a.Unmap()
		ns := ""
		al, err := ipam.New(l.store, l.kv).GetAssignmentAttributes(ctx, a)
		switch {
		case err == nil:
			ns = al.Attrs["namespace"]
		case errors.Is(err, ipam.ErrNotAssigned):
		default:
			log.WithError(err).WithField("address", a).Debug("No IPAM allocation to find the endpoint by")
		}
		if ns != "" {
			rs, err := l.workloads(ctx, ns, []byte(a.String()), holds(a))
			if err != nil || len(rs) > 0 {
				return rs, err
			}
		}
		// Not from IPAM (or its pod's endpoint is elsewhere): every
		// WorkloadEndpoint.
		return l.workloads(ctx, "", []byte(a.String()), holds(a))
	case e.Namespace != "":
		return l.workloads(ctx, e.Namespace, []byte(e.Name), func(w *v3.WorkloadEndpoint) bool {
			return w.Name == e.Name || w.Spec.Pod == e.Name
		})
	}
	return nil, nil
}

func holds(a netip.Addr) func(*v3.WorkloadEndpoint) bool {
	return func(w *v3.WorkloadEndpoint) bool {
		for _, s := range w.Spec.IPNetworks {
			if p, err := ParseNet(s); err == nil && p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// workloads reads the WorkloadEndpoints of a namespace (every one for
// ""), decoding only the values that contain text (a name or address
// appears in any value that could match), and keeps those keep accepts.
func (l *loader) workloads(ctx context.Context, namespace string, text []byte, keep func(*v3.WorkloadEndpoint) bool) ([]v3.Resource, error) {
	path, _, err := datastore.ListPath(datastore.ListOptions{Kind: v3.KindWorkloadEndpoint, Namespace: namespace})
	if err != nil {
		return nil, err
	}
	kvs, _, err := l.kv.List(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("listing WorkloadEndpoints under %s: %w", path, err)
	}
	info, _ := v3.KindByName(v3.KindWorkloadEndpoint)
	var out []v3.Resource
	for _, p := range kvs {
		if !bytes.Contains(p.Value, text) {
			continue
		}
		r, err := l.codec.DecodeKind(info, p.Key, p.Value, p.Revision)
		if err != nil {
			log.WithError(err).WithField("key", p.Key).Warn("Skipping a WorkloadEndpoint that does not decode")
			continue
		}
		if w, ok := r.(*v3.WorkloadEndpoint); ok && keep(w) {
			out = append(out, w)
		}
	}
	return out, nil
}

// HostAddresses adds the nodes' own addresses (BGP addresses, listed
// addresses and tunnel addresses) to hosts, mapped to the node's name.
func HostAddresses(nodes []v3.Resource, hosts map[string]string) map[string]string {
	if hosts == nil {
		hosts = map[string]string{}
	}
	for _, r := range nodes {
		n, ok := r.(*v3.Node)
		if !ok {
			continue
		}
		add := func(s string) {
			if p, err := netip.ParsePrefix(s); err == nil {
				hosts[p.Addr().Unmap().String()] = n.Name
			} else if a, err := netip.ParseAddr(s); err == nil {
				hosts[a.Unmap().String()] = n.Name
			}
		}
		if b := n.Spec.BGP; b != nil {
			add(b.IPv4Address)
			add(b.IPv6Address)
			add(b.IPv4IPIPTunnelAddr)
		}
		for _, a := range n.Spec.Addresses {
			add(a.Address)
		}
		add(n.Spec.IPv4VXLANTunnelAddr)
		add(n.Spec.IPv6VXLANTunnelAddr)
	}
	return hosts
}
