package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/netconf"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
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

// Pod is what the datastore holds for an invocation's workload on its
// node: the endpoint of the invocation's interface (Mine), the workload's
// endpoints with other interfaces (Others), and, when the value under
// Mine's key is not a valid endpoint, that value (BadMine).
type Pod struct {
	Mine    *v3.WorkloadEndpoint
	Others  []*v3.WorkloadEndpoint
	BadMine *datastore.BadValueError
}

// ReadPod reads, in one range request, every endpoint of w's workload on
// w's node, whatever its interface: those whose names start with w's
// endpoint name without the interface and whose spec names the same node,
// orchestrator and workload.
func ReadPod(ctx context.Context, store datastore.Interface, w netconf.Workload) (Pod, error) {
	opts := datastore.ListOptions{Kind: v3.KindWorkloadEndpoint, Namespace: w.Namespace,
		NamePrefix: names.WorkloadEndpointName(w.Node, w.Orchestrator, w.Name, "")}
	var items []v3.Resource
	var bad []*datastore.BadValueError
	var err error
	if l, ok := store.(datastore.BadValueLister); ok {
		items, bad, _, err = l.ListWithBadValues(ctx, opts)
	} else {
		items, _, err = store.List(ctx, opts)
	}
	if err != nil {
		return Pod{}, fmt.Errorf("reading the endpoints of %s/%s on node %q: %w", w.Namespace, w.Name, w.Node, err)
	}
	var pod Pod
	for _, r := range items {
		ep, ok := r.(*v3.WorkloadEndpoint)
		if !ok || ep.Spec.Node != w.Node || ep.Spec.Orchestrator != w.Orchestrator ||
			(ep.Spec.Pod != w.Name && ep.Spec.Workload != w.Name) {
			continue
		}
		if ep.Name == w.EndpointName() {
			pod.Mine = ep
		} else {
			pod.Others = append(pod.Others, ep)
		}
	}
	for _, bv := range bad {
		if bv.Key == Key(w) {
			pod.BadMine = bv
		}
	}
	return pod, nil
}

// OtherInterface returns an endpoint of the workload's container (of
// containerID) with another interface than the invocation's, if any.
func (p Pod) OtherInterface(containerID string) *v3.WorkloadEndpoint {
	for _, ep := range p.Others {
		if ep.Spec.ContainerID == containerID {
			return ep
		}
	}
	return nil
}

// Write validates ep and stores it: a create when prev is nil, otherwise
// a compare-and-swap over prev (a concurrent change fails the write). A
// value under ep's key that is not a valid endpoint (bad) is replaced, as
// long as it is still the one read.
func Write(ctx context.Context, store datastore.Interface, ep, prev *v3.WorkloadEndpoint, bad *datastore.BadValueError) (*v3.WorkloadEndpoint, error) {
	v3.Default(ep)
	if err := v3.Validate(ep); err != nil {
		return nil, notSent{err}
	}
	var r v3.Resource
	var err error
	switch {
	case prev != nil:
		ep.ResourceVersion = prev.ResourceVersion
		r, err = store.Update(ctx, ep)
	case bad != nil:
		ep.ResourceVersion = strconv.FormatInt(bad.Revision, 10)
		r, err = store.Update(ctx, ep)
	default:
		r, err = store.Create(ctx, ep)
	}
	if err != nil {
		return nil, err // the datastore's error names the endpoint
	}
	return r.(*v3.WorkloadEndpoint), nil
}

// notSent marks an error of Write that came before anything was sent.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// MayHaveBeenWritten reports whether a Write that failed with err may
// still have been applied: true unless it failed before sending, etcd
// answered (the write was refused: conflict, already exists, not found),
// or the request never reached etcd (its connection could not be
// dialled).
func MayHaveBeenWritten(err error) bool {
	var op *net.OpError
	var ns notSent
	switch {
	case err == nil:
		return true
	case errors.As(err, &ns), errors.Is(err, datastore.ErrConflict), errors.Is(err, datastore.ErrAlreadyExists),
		errors.Is(err, datastore.ErrNotFound), errors.Is(err, datastore.ErrBadValue):
		return false
	case errors.Is(err, datastore.ErrUnavailable) && errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// Restore is the undo of a Write that stored written over prev (nil when
// it created the endpoint): it puts prev back, or deletes the endpoint, as
// long as the endpoint is still the one written.
func Restore(ctx context.Context, store datastore.Interface, written, prev *v3.WorkloadEndpoint) error {
	k := datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: written.Namespace, Name: written.Name}
	var err error
	if prev == nil {
		_, err = store.Delete(ctx, k, written.ResourceVersion)
	} else {
		back := *prev
		back.ResourceVersion = written.ResourceVersion
		_, err = store.Update(ctx, &back)
	}
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("restoring %s: %w", k, err)
	}
	return nil
}

// RestoreIfWritten is the undo of a Write whose answer was lost: when w's
// endpoint is the one it would have stored (w's container, with addrs),
// it is restored as Restore does.
func RestoreIfWritten(ctx context.Context, store datastore.Interface, w netconf.Workload, addrs []string, prev *v3.WorkloadEndpoint) error {
	r, err := store.Get(ctx, Key(w))
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", Key(w), err)
	}
	ep, ok := r.(*v3.WorkloadEndpoint)
	if !ok || ep.Spec.ContainerID != w.ContainerID || !slices.Equal(ep.Spec.IPNetworks, addrs) ||
		(prev != nil && ep.ResourceVersion == prev.ResourceVersion) {
		return nil // not written
	}
	return Restore(ctx, store, ep, prev)
}

// DeleteIfOwned deletes the endpoint pod.Mine of w's interface when it
// belongs to w's container, so a late DEL for a replaced container leaves
// its successor's endpoint alone, and removes a value under its key that
// is not a valid endpoint. A missing endpoint is not an error. It reports
// whether it deleted.
func DeleteIfOwned(ctx context.Context, store datastore.Interface, w netconf.Workload, pod Pod) (bool, error) {
	rev := ""
	switch {
	case pod.Mine != nil:
		if pod.Mine.Spec.ContainerID != "" && pod.Mine.Spec.ContainerID != w.ContainerID {
			return false, nil
		}
		rev = pod.Mine.ResourceVersion
	case pod.BadMine != nil:
		rev = strconv.FormatInt(pod.BadMine.Revision, 10)
	default:
		return false, nil
	}
	_, err := store.Delete(ctx, Key(w), rev)
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		return false, nil
	case errors.Is(err, datastore.ErrBadValue):
		return true, nil // deleted; the store logged what it held
	case err != nil:
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
