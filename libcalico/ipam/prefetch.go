package ipam

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// maxPrefetchBlocks bounds the affine blocks Prefetch reads (the node's
// most recently claimed ones, which an assignment tries first).
const maxPrefetchBlocks = 8

// prefetchTTL is how long what Prefetch read counts as just read.
const prefetchTTL = time.Second

// prefetched marks what Prefetch read for a node: its next AutoAssign
// (within prefetchTTL) decides with it as if it had just read it, once.
type prefetched struct {
	at       time.Time
	versions []int
	blocks   map[netip.Prefix]bool
}

// Prefetch reads, all at once, what an auto-assignment for host of the
// given IP versions starts from: the pools, reservations and IPAM
// configuration, host's affinities, then its confirmed affine blocks.
// The next AutoAssign for host then begins with its compare-and-swap
// instead of these reads. Nothing read is trusted more than a fresh read
// would be: every write it leads to is conditional on it still being
// current. A process that assigns once (a CNI plugin) calls Prefetch
// while it does other work, such as reading its endpoint.
func (a *Allocator) Prefetch(ctx context.Context, host string, versions ...int) error {
	if err := checkName("host name", host); err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	var snap *snapshot
	affs := make([][]Affinity, len(versions))
	fns := []func() error{func() (err error) { snap, err = a.readSnapshot(ctx); return }}
	for i, v := range versions {
		if v != 4 && v != 6 {
			return fmt.Errorf("prefetch for node %q: IP version %d: %w", host, v, ErrInvalid)
		}
		fns = append(fns, func() (err error) {
			affs[i], err = a.listAffinities(ctx, hostAffinitiesPrefix(host, v))
			return
		})
	}
	if err := parallel(fns...); err != nil {
		return fmt.Errorf("prefetch for node %q: %w", host, err)
	}

	var want []Affinity
	for _, as := range affs {
		for _, aff := range as {
			if aff.State == AffinityConfirmed {
				want = append(want, aff)
			}
		}
	}
	slices.SortStableFunc(want, func(x, y Affinity) int { return cmp.Compare(y.Revision, x.Revision) })
	want = want[:min(len(want), maxPrefetchBlocks)]
	blocks := make([]storedBlock, len(want))
	fns = fns[:0]
	for i, aff := range want {
		fns = append(fns, func() error {
			key := blockKey(aff.CIDR)
			b, rev, err := a.getBlock(ctx, key)
			if err != nil {
				return fmt.Errorf("block %s: %w", aff.CIDR, err)
			}
			blocks[i] = storedBlock{block: b, key: key, rev: rev}
			return nil
		})
	}
	// A block that cannot be read is read again by the assignment.
	_ = parallel(fns...)

	mark := prefetched{at: time.Now(), versions: slices.Clone(versions), blocks: map[netip.Prefix]bool{}}
	a.cache.setSnapshot(snap)
	for i, v := range versions {
		a.cache.setAffinities(host, v, affs[i])
	}
	for i, sb := range blocks {
		if sb.block != nil {
			a.cache.setBlock(want[i].CIDR, sb.block, sb.rev)
			mark.blocks[want[i].CIDR] = true
		}
	}
	a.cache.setPrefetched(host, mark)
	return nil
}
