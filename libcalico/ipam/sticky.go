package ipam

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// A sticky reservation is an ordinary allocation whose handle is named
// after the address's owner (namespace, workload, pod name) rather than
// after a container, so it outlives the containers that use it. Its
// attributes say whose it is and under which release policy, and which
// container (if any) uses it now: AttrContainer is empty while no
// container does. ReleaseByHandle on the reservation's handle ends it.
const (
	// AttrReleasePolicy is the reservation's release policy (immutable
	// or never); its presence marks a sticky reservation.
	AttrReleasePolicy = "releasePolicy"
	// AttrOwnerKind, AttrOwnerName and AttrOwnerUID name the workload
	// the address belongs to (a StatefulSet).
	AttrOwnerKind = "ownerKind"
	AttrOwnerName = "ownerName"
	AttrOwnerUID  = "ownerUID"
	// AttrContainer is the container using the address, "" when none.
	AttrContainer = "containerID"
	// AttrPodUID is the UID of the pod using (or last using) it.
	AttrPodUID = "podUID"
)

// A sticky address's AttrNode is the node it is used on (BGP routes it
// as a borrowed /32 when that is not its block's node); it is removed
// while no container uses the address.

// ErrInUse says a sticky address is still used by another container (its
// previous pod has not been torn down yet).
var ErrInUse = errors.New("sticky address still in use by another container")

// StickyHandlePrefix starts every sticky reservation's handle ID; it is
// not "<network>.", so nothing releasing a network's container handles
// (CNI GC) takes it for one.
const StickyHandlePrefix = "sticky."

// StickyHandleID is the handle of the addresses reserved for pod within
// its owner (kind/name) in namespace on network:
// sticky.<network>.<namespace>.<kind>.<owner>.<pod>.
func StickyHandleID(network, namespace, kind, owner, pod string) string {
	return StickyHandlePrefix + strings.Join([]string{network, namespace, strings.ToLower(kind), owner, pod}, ".")
}

// IsSticky says whether an allocation is a sticky reservation.
func (al Allocation) IsSticky() bool { return al.Attrs[AttrReleasePolicy] != "" }

// InUse says whether a sticky reservation is used by a container now.
func (al Allocation) InUse() bool { return al.Attrs[AttrContainer] != "" }

// UseSticky makes container attrs[AttrContainer] the user of every
// address handle holds, with attrs (merged over what is stored) as their
// attributes, and returns the addresses. A handle that does not exist
// fails with an error matching datastore.ErrNotFound; an address another
// container still uses fails with ErrInUse, naming it, and nothing is
// changed. The same container using it again is fine.
func (a *Allocator) UseSticky(ctx context.Context, handle string, attrs map[string]string) ([]netip.Addr, error) {
	if err := checkName("handle ID", handle); err != nil {
		return nil, err
	}
	container := attrs[AttrContainer]
	if container == "" {
		return nil, fmt.Errorf("using sticky handle %q: no container named: %w", handle, ErrInvalid)
	}
	cidrs, _, err := a.handleBlocks(ctx, handle)
	if err != nil {
		return nil, err
	}
	var used []netip.Prefix
	var out []netip.Addr
	for _, cidr := range cidrs {
		got, err := a.updateHandleAttrs(ctx, cidr, handle, func(cur map[string]string) (map[string]string, error) {
			if holder := cur[AttrContainer]; holder != "" && holder != container {
				return nil, fmt.Errorf("used by container %s of pod %s/%s (uid %s) on node %q: %w",
					holder, cur["namespace"], cur["pod"], cur[AttrPodUID], cur[AttrNode], ErrInUse)
			}
			next := map[string]string{}
			maps.Copy(next, cur)
			maps.Copy(next, attrs)
			return next, nil
		})
		if err != nil {
			// Give back what this call took, so nothing is half-done.
			for _, c := range used {
				_, _ = a.updateHandleAttrs(ctx, c, handle, stopUsing(container))
			}
			return nil, fmt.Errorf("sticky handle %q: %w", handle, err)
		}
		used = append(used, cidr)
		out = append(out, got...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sticky handle %q holds no address: %w", handle, datastore.ErrNotFound)
	}
	log.WithFields(log.Fields{"handle": handle, "container": container, "ips": out}).Info("Using sticky addresses")
	return out, nil
}

// StopUsingSticky marks every sticky address container uses as unused,
// keeping the reservation, and returns how many it found. It scans the
// blocks: the container's DEL does not know the reservation's handle.
func (a *Allocator) StopUsingSticky(ctx context.Context, container string) (int, error) {
	if container == "" {
		return 0, fmt.Errorf("stop using sticky addresses: no container named: %w", ErrInvalid)
	}
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sb := range blocks {
		handles := map[string]bool{}
		for _, al := range sb.block.allocations() {
			if al.IsSticky() && al.Attrs[AttrContainer] == container {
				handles[al.HandleID] = true
			}
		}
		for h := range handles {
			got, err := a.updateHandleAttrs(ctx, sb.block.prefix, h, stopUsing(container))
			if err != nil {
				return n, fmt.Errorf("sticky handle %q: %w", h, err)
			}
			n += len(got)
		}
	}
	if n > 0 {
		log.WithFields(log.Fields{"container": container, "addresses": n}).Info("Sticky addresses no longer used; still reserved")
	}
	return n, nil
}

// stopUsing returns the attributes without container as user; others'
// use is left alone.
func stopUsing(container string) func(map[string]string) (map[string]string, error) {
	return func(cur map[string]string) (map[string]string, error) {
		if cur[AttrContainer] != container {
			return cur, nil
		}
		next := maps.Clone(cur)
		delete(next, AttrContainer)
		delete(next, AttrNode)
		return next, nil
	}
}

// updateHandleAttrs rewrites, with compare-and-swap, the attributes of
// every address handle holds in block cidr to what change returns for
// their current ones, and returns those addresses. An error from change
// stops it with nothing written.
func (a *Allocator) updateHandleAttrs(ctx context.Context, cidr netip.Prefix, handle string, change func(map[string]string) (map[string]string, error)) ([]netip.Addr, error) {
	key := blockKey(cidr)
	for attempt := 1; attempt <= maxRetries; attempt++ {
		b, rev, err := a.getBlock(ctx, key)
		if errors.Is(err, datastore.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", cidr, err)
		}
		nb := b.clone()
		var addrs []netip.Addr
		changed := false
		for o, idx := range nb.Allocations {
			if idx == nil || nb.Attributes[*idx].handle() != handle {
				continue
			}
			cur := nb.Attributes[*idx].Secondary
			next, err := change(maps.Clone(cur))
			if err != nil {
				return nil, fmt.Errorf("address %s: %w", nb.addr(o), err)
			}
			addrs = append(addrs, nb.addr(o))
			if !maps.Equal(cur, next) {
				v := nb.attributeIndex(handle, next)
				nb.Allocations[o] = &v
				changed = true
			}
		}
		if !changed {
			return addrs, nil
		}
		nb.compactAttributes()
		err = a.putBlock(ctx, key, nb, rev)
		if err == nil {
			return addrs, nil
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("writing block %s: %w", cidr, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("block %s: %w", cidr, ErrTooManyRetries)
}

// StickyAddrsOf returns, in address order, the sticky addresses container
// uses.
func (a *Allocator) StickyAddrsOf(ctx context.Context, container string) ([]netip.Addr, error) {
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, sb := range blocks {
		for _, al := range sb.block.allocations() {
			if al.IsSticky() && container != "" && al.Attrs[AttrContainer] == container {
				out = append(out, al.IP)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
