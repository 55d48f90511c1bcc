package ipamplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// AddRequested assigns exactly the addresses asked for (a pod's
// cni.projectcalico.org/ipAddrs annotation) under the container's
// handle; a repeated ADD gets what the handle already holds when that is
// the same. An address IPAM cannot give (taken, outside every pool)
// fails the ADD, with anything assigned so far released.
func (p Plugin) AddRequested(ctx context.Context, prep Prepared, addrs []netip.Addr) (*current.Result, []netip.Addr, error) {
	handle := prep.handle
	want := slices.Clone(addrs)
	slices.SortFunc(want, netip.Addr.Compare)
	if len(prep.held) > 0 {
		if slices.Equal(prep.held, want) {
			p.Log.WithField("handle", handle).Info("Handle already holds the requested addresses; returning them")
			return requestedResult(want), nil, nil
		}
		// The pod asks for other addresses than its handle holds: start
		// over with what it asks for.
		if err := p.Alloc.ReleaseByHandle(ctx, handle); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return nil, nil, session.Retryable(fmt.Errorf("releasing handle %s: %w", handle, err))
		}
	}
	var assigned []netip.Addr
	for _, a := range want {
		err := p.Alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: a, HandleID: handle, Attrs: attributes(p.Workload), Hostname: p.Workload.Node,
			Intent: ipam.IntentWorkload})
		if err != nil {
			// Only what this call assigned.
			if rerr := p.ReleaseAssigned(ctx, handle, assigned); rerr != nil {
				p.Log.WithError(rerr).Error("Could not release a partial assignment")
			}
			return nil, nil, session.Retryable(fmt.Errorf("assigning the requested address %s on node %q: %w", a, p.Workload.Node, err))
		}
		assigned = append(assigned, a)
	}
	p.Log.WithField("handle", handle).WithField("addresses", want).Info("Assigned the requested addresses")
	return requestedResult(want), assigned, nil
}

func requestedResult(addrs []netip.Addr) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, a := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}})
	}
	return res
}
