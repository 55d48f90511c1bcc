// Package ipamplugin is the logic of the calico-ipam plugin: assign a
// container's addresses under its handle, release them, check them. The
// calico-ipam binary runs it; the calico plugin runs it in-process when its
// ipam type is calico-ipam, which gives the same result without a second
// process and a second datastore connection.
package ipamplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/cni-plugin/netconf"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// Type is the ipam type this package implements.
const Type = "calico-ipam"

// Plugin assigns and releases one network's addresses for workloads.
type Plugin struct {
	Alloc    *ipam.Allocator
	Conf     *netconf.NetConf
	Workload netconf.Workload
	Log      *log.Entry
	// NamespaceLabels are the labels of the pod's namespace when the
	// plugin read it (Kubernetes mode), for the pools' namespaceSelector;
	// nil otherwise, which matches as a namespace without labels.
	NamespaceLabels map[string]string
}

// Prepared is what Prepare read for Add: the addresses the container's
// handle already holds.
type Prepared struct {
	handle string
	held   []netip.Addr
}

// Prepare reads, in parallel, the container's handle and what assigning
// it addresses starts from (the allocator's Prefetch), so that Add can go
// straight to the assignment. It only reads: a caller may run it
// alongside work that decides whether Add is needed at all.
func (p Plugin) Prepare(ctx context.Context, containerID string) (Prepared, error) {
	prep := Prepared{handle: netconf.HandleID(p.Conf.Name, containerID)}
	var herr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fam, _ := p.Conf.AssignFamilies() // checked by netconf.Load
		var versions []int
		if fam.IPv4 {
			versions = append(versions, 4)
		}
		if fam.IPv6 {
			versions = append(versions, 6)
		}
		// Only an optimisation: Add reads again whatever this could not.
		if err := p.Alloc.Prefetch(ctx, p.Workload.Node, versions...); err != nil {
			p.Log.WithError(err).Debug("Could not prefetch IPAM state")
		}
	}()
	prep.held, herr = p.Alloc.IPsByHandle(ctx, prep.handle)
	wg.Wait()
	if herr != nil && !errors.Is(herr, datastore.ErrNotFound) {
		return prep, session.Retryable(fmt.Errorf("reading handle %s: %w", prep.handle, herr))
	}
	return prep, nil
}

// Add returns the addresses the container's handle already holds (a
// repeated ADD) or assigns the configured families' addresses to it, and
// the addresses it assigned now (none when it returned held ones). A
// partial assignment is released before the error is returned.
func (p Plugin) Add(ctx context.Context, containerID string) (*current.Result, []netip.Addr, error) {
	prep, err := p.Prepare(ctx, containerID)
	if err != nil {
		return nil, nil, err
	}
	return p.AddPrepared(ctx, prep)
}

// AddPrepared is Add after Prepare.
func (p Plugin) AddPrepared(ctx context.Context, prep Prepared) (*current.Result, []netip.Addr, error) {
	handle := prep.handle
	var prefixes []netip.Prefix
	var assigned []netip.Addr
	if len(prep.held) > 0 {
		p.Log.WithField("handle", handle).Info("Handle already holds addresses; returning them")
		for _, a := range prep.held {
			prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
		}
	} else {
		fam, _ := p.Conf.AssignFamilies() // checked by netconf.Load
		req := ipam.AutoAssignArgs{HandleID: handle, Hostname: p.Workload.Node, Attrs: attributes(p.Workload),
			IPv4Pools: p.Conf.IPAM.IPv4Pools, IPv6Pools: p.Conf.IPAM.IPv6Pools, NamespaceLabels: p.NamespaceLabels}
		if fam.IPv4 {
			req.Num4 = 1
		}
		if fam.IPv6 {
			req.Num6 = 1
		}
		v4, v6, err := p.Alloc.AutoAssign(ctx, req)
		for _, got := range []*ipam.Assignments{v4, v6} {
			if got != nil {
				prefixes = append(prefixes, got.IPs...)
			}
		}
		for _, pfx := range prefixes {
			assigned = append(assigned, pfx.Addr())
		}
		if err == nil && len(prefixes) != req.Num4+req.Num6 {
			err = fmt.Errorf("asked for %d IPv4 and %d IPv6 addresses, got %v: %w", req.Num4, req.Num6, prefixes, ipam.ErrExhausted)
		}
		if err != nil {
			// Only what this call assigned: a concurrent ADD of the same
			// container may hold addresses under the same handle.
			if rerr := p.ReleaseAssigned(ctx, prep.handle, assigned); rerr != nil {
				p.Log.WithError(rerr).Error("Could not release a partial assignment")
			}
			return nil, nil, session.Retryable(fmt.Errorf("assigning addresses on node %q: %w", p.Workload.Node, err))
		}
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, pfx := range prefixes {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())}})
	}
	p.Log.WithField("handle", handle).WithField("addresses", prefixes).Info("Assigned")
	return res, assigned, nil
}

// ReleaseAssigned releases addrs while handle still holds them, and
// nothing else: the undo of one assignment.
func (p Plugin) ReleaseAssigned(ctx context.Context, handle string, addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	opts := make([]ipam.ReleaseOptions, len(addrs))
	for i, a := range addrs {
		opts[i] = ipam.ReleaseOptions{Address: a, Handle: handle}
	}
	if _, err := p.Alloc.Release(ctx, opts...); err != nil {
		return session.Retryable(fmt.Errorf("releasing %v of handle %s: %w", addrs, handle, err))
	}
	p.Log.WithField("handle", handle).WithField("addresses", addrs).Info("Released the addresses this ADD assigned")
	return nil
}

// HandleID is the handle of containerID's addresses on the plugin's
// network.
func (p Plugin) HandleID(containerID string) string {
	return netconf.HandleID(p.Conf.Name, containerID)
}

// Del releases everything the container's handle holds; a handle that does
// not exist (already released, or a container using a sticky address) is
// fine. A sticky address the container used stays reserved, unused.
func (p Plugin) Del(ctx context.Context, containerID string) error {
	handle := netconf.HandleID(p.Conf.Name, containerID)
	err := p.Alloc.ReleaseByHandle(ctx, handle)
	if errors.Is(err, datastore.ErrNotFound) {
		if _, err := p.Alloc.StopUsingSticky(ctx, containerID); err != nil {
			return session.Retryable(fmt.Errorf("stop using sticky addresses of container %s: %w", containerID, err))
		}
		return nil
	}
	if err != nil {
		return session.Retryable(fmt.Errorf("releasing handle %s: %w", handle, err))
	}
	p.Log.WithField("handle", handle).Info("Released")
	return nil
}

// Check verifies that the container's handle holds exactly prev's
// addresses.
func (p Plugin) Check(ctx context.Context, containerID string, prev *current.Result) error {
	handle := netconf.HandleID(p.Conf.Name, containerID)
	held, err := p.Alloc.IPsByHandle(ctx, handle)
	if errors.Is(err, datastore.ErrNotFound) {
		// A container using a sticky address holds it under its pod's
		// reservation.
		held, err = p.Alloc.StickyAddrsOf(ctx, containerID)
	}
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return session.Retryable(fmt.Errorf("reading handle %s: %w", handle, err))
	}
	var want []netip.Addr
	for _, ip := range prev.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		want = append(want, a.Unmap())
	}
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(want, held) {
		return fmt.Errorf("handle %s holds %v, prevResult has %v", handle, held, want)
	}
	return nil
}

// attributes are stored with each address: who holds it and since when.
func attributes(w netconf.Workload) map[string]string {
	attrs := map[string]string{"node": w.Node, "timestamp": time.Now().UTC().Format(time.RFC3339)}
	if w.IsKubernetes() {
		attrs["namespace"], attrs["pod"] = w.Namespace, w.Name
	}
	return attrs
}

// Held says whether the container's own handle already holds addresses
// (a repeated ADD).
func (p Prepared) Held() bool { return len(p.held) > 0 }
