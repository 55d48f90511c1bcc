package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/netconf"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Labels every workload endpoint carries, as Calico sets them.
const (
	LabelNamespace    = "projectcalico.org/namespace"
	LabelOrchestrator = "projectcalico.org/orchestrator"
)

// Endpoint is the WorkloadEndpoint of w with its addresses (as /32 and
// /128), profiles and veth.
func Endpoint(w netconf.Workload, addrs []netip.Addr, profiles []string, hostVeth string, mac net.HardwareAddr) *v3.WorkloadEndpoint {
	ep := &v3.WorkloadEndpoint{
		TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{
			Name: w.EndpointName(), Namespace: w.Namespace,
			Labels: map[string]string{LabelNamespace: w.Namespace, LabelOrchestrator: w.Orchestrator},
		},
		Spec: v3.WorkloadEndpointSpec{
			Orchestrator: w.Orchestrator, Node: w.Node, ContainerID: w.ContainerID,
			Endpoint: w.Endpoint, Profiles: profiles, InterfaceName: hostVeth, MAC: mac.String(),
		},
	}
	if w.IsKubernetes() {
		ep.Spec.Pod = w.Name
	} else {
		ep.Spec.Workload = w.Name
	}
	for _, a := range addrs {
		ep.Spec.IPNetworks = append(ep.Spec.IPNetworks, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return ep
}

// Key is the datastore key of w's endpoint.
func Key(w netconf.Workload) datastore.Key {
	return datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: w.Namespace, Name: w.EndpointName()}
}

// Get reads w's endpoint; nil (and no error) when there is none.
func Get(ctx context.Context, store datastore.Interface, w netconf.Workload) (*v3.WorkloadEndpoint, error) {
	r, err := store.Get(ctx, Key(w))
	if errors.Is(err, datastore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", Key(w), err)
	}
	ep, ok := r.(*v3.WorkloadEndpoint)
	if !ok {
		return nil, fmt.Errorf("reading %s: got a %T", Key(w), r)
	}
	return ep, nil
}

// Write validates ep and stores it: a create when prev is nil, otherwise
// a compare-and-swap over prev (a concurrent change fails the write).
func Write(ctx context.Context, store datastore.Interface, ep, prev *v3.WorkloadEndpoint) (*v3.WorkloadEndpoint, error) {
	v3.Default(ep)
	if err := v3.Validate(ep); err != nil {
		return nil, err
	}
	var r v3.Resource
	var err error
	if prev == nil {
		r, err = store.Create(ctx, ep)
	} else {
		ep.ResourceVersion = prev.ResourceVersion
		r, err = store.Update(ctx, ep)
	}
	if err != nil {
		return nil, err // the datastore's error names the endpoint
	}
	return r.(*v3.WorkloadEndpoint), nil
}

// DeleteIfOwned deletes w's endpoint when it belongs to w's container, so a
// late DEL for a replaced container leaves its successor's endpoint alone.
// A missing endpoint is not an error. It reports whether it deleted.
func DeleteIfOwned(ctx context.Context, store datastore.Interface, w netconf.Workload) (bool, error) {
	ep, err := Get(ctx, store, w)
	if err != nil || ep == nil {
		return false, err
	}
	if ep.Spec.ContainerID != "" && ep.Spec.ContainerID != w.ContainerID {
		return false, nil
	}
	_, err = store.Delete(ctx, Key(w), ep.ResourceVersion)
	if errors.Is(err, datastore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", Key(w), err)
	}
	return true, nil
}

// Result is the CNI result describing an existing endpoint: the host veth,
// the workload interface in netns, and the endpoint's addresses.
func Result(ep *v3.WorkloadEndpoint, netns string) (*current.Result, error) {
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: ep.Spec.InterfaceName, Mac: "ee:ee:ee:ee:ee:ee"},
			{Name: ep.Spec.Endpoint, Mac: ep.Spec.MAC, Sandbox: netns},
		},
	}
	for _, n := range ep.Spec.IPNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, fmt.Errorf("workloadendpoint %q: ipNetworks %q: %w", ep.Name, n, err)
		}
		res.IPs = append(res.IPs, &current.IPConfig{
			Address:   net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
			Interface: current.Int(1),
		})
	}
	return res, nil
}
