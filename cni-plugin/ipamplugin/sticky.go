package ipamplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// Sticky is a pod's sticky reservation: its handle (named after the
// owner, not the container) and the attributes naming the owner and the
// release policy.
type Sticky struct {
	Handle string
	Attrs  map[string]string
}

// AddSticky gives containerID the addresses of its pod's reservation,
// creating the reservation on the pod's first ADD. It returns the
// result and whether it created the reservation (an undo then releases
// it; otherwise an undo only stops the container using it). While
// another container (the previous pod, not torn down yet) still uses the
// addresses, the ADD fails with a "try again later" error naming it:
// never two pods with one address.
func (p Plugin) AddSticky(ctx context.Context, s Sticky, containerID string) (*current.Result, bool, error) {
	attrs := attributes(p.Workload)
	maps.Copy(attrs, s.Attrs)
	attrs[ipam.AttrContainer] = containerID
	logCtx := p.Log.WithField("handle", s.Handle)
	for range 3 {
		addrs, err := p.Alloc.UseSticky(ctx, s.Handle, attrs)
		switch {
		case err == nil:
			logCtx.WithField("addresses", addrs).Info("Reusing the pod's sticky addresses")
			return stickyResult(addrs), false, nil
		case errors.Is(err, ipam.ErrInUse):
			return nil, false, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("pod %s/%s: its sticky address is still held by its predecessor: %v", p.Workload.Namespace, p.Workload.Name, err), "")
		case !errors.Is(err, datastore.ErrNotFound):
			return nil, false, session.Retryable(fmt.Errorf("using sticky handle %s: %w", s.Handle, err))
		}
		// The pod's first address.
		fam, _ := p.Conf.AssignFamilies() // checked by netconf.Load
		req := ipam.AutoAssignArgs{HandleID: s.Handle, NewHandle: true, Hostname: p.Workload.Node, Attrs: attrs,
			IPv4Pools: p.Conf.IPAM.IPv4Pools, IPv6Pools: p.Conf.IPAM.IPv6Pools, NamespaceLabels: p.NamespaceLabels}
		if fam.IPv4 {
			req.Num4 = 1
		}
		if fam.IPv6 {
			req.Num6 = 1
		}
		v4, v6, err := p.Alloc.AutoAssign(ctx, req)
		var got []netip.Addr
		for _, as := range []*ipam.Assignments{v4, v6} {
			if as != nil {
				for _, pfx := range as.IPs {
					got = append(got, pfx.Addr())
				}
			}
		}
		if errors.Is(err, ipam.ErrAlreadyAssigned) && len(got) == 0 {
			continue // created meanwhile: use it
		}
		if err == nil && len(got) != req.Num4+req.Num6 {
			err = fmt.Errorf("asked for %d IPv4 and %d IPv6 addresses, got %v: %w", req.Num4, req.Num6, got, ipam.ErrExhausted)
		}
		if err != nil {
			if rerr := p.ReleaseAssigned(ctx, s.Handle, got); rerr != nil {
				p.Log.WithError(rerr).Error("Could not release a partial assignment")
			}
			return nil, false, session.Retryable(fmt.Errorf("assigning sticky addresses on node %q: %w", p.Workload.Node, err))
		}
		logCtx.WithField("addresses", got).Info("Reserved sticky addresses for the pod")
		return stickyResult(got), true, nil
	}
	return nil, false, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("sticky handle %s kept changing", s.Handle), "")
}

// UndoSticky undoes AddSticky: it releases a reservation it created, and
// otherwise only stops containerID using it.
func (p Plugin) UndoSticky(ctx context.Context, s Sticky, containerID string, created bool) error {
	if created {
		if err := p.Alloc.ReleaseByHandle(ctx, s.Handle); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return session.Retryable(fmt.Errorf("releasing sticky handle %s: %w", s.Handle, err))
		}
		return nil
	}
	if _, err := p.Alloc.StopUsingSticky(ctx, containerID); err != nil {
		return session.Retryable(fmt.Errorf("stop using sticky addresses of container %s: %w", containerID, err))
	}
	return nil
}

func stickyResult(addrs []netip.Addr) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, a := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}})
	}
	return res
}
