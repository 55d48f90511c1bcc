package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// GetUtilization reports, per pool (every pool, or those opts names, in
// name order), its capacity, how many addresses are in use, and its
// blocks, as calicoctl ipam show prints them.
func (a *Allocator) GetUtilization(ctx context.Context, opts UtilizationOptions) ([]PoolUtilization, error) {
	pools, err := a.listPools(ctx)
	if err != nil {
		return nil, err
	}
	if len(opts.Pools) > 0 {
		var chosen []pool
		for _, name := range opts.Pools {
			p, ok := findPool(pools, name)
			if !ok {
				return nil, fmt.Errorf("utilization of pool %q: %w", name, ErrPoolNotUsable)
			}
			chosen = append(chosen, p)
		}
		pools = chosen
	}
	slices.SortFunc(pools, func(x, y pool) int { return strings.Compare(x.name, y.name) })
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(blocks, func(x, y storedBlock) int { return x.block.prefix.Addr().Compare(y.block.prefix.Addr()) })
	out := make([]PoolUtilization, 0, len(pools))
	for _, p := range pools {
		u := PoolUtilization{Name: p.name, CIDR: p.cidr, Capacity: poolCapacity(p.cidr)}
		for _, sb := range blocks {
			b := sb.block
			if !p.cidr.Contains(b.prefix.Addr()) || b.prefix.Bits() < p.cidr.Bits() {
				continue
			}
			u.InUse += uint64(b.inUse())
			u.Blocks = append(u.Blocks, BlockUtilization{CIDR: b.prefix, Host: b.host(), Capacity: len(b.Allocations), InUse: b.inUse()})
		}
		out = append(out, u)
	}
	return out, nil
}

// poolCapacity is the number of addresses in a pool, saturating at the
// largest uint64.
func poolCapacity(p netip.Prefix) uint64 {
	bits := p.Addr().BitLen() - p.Bits()
	if bits >= 64 {
		return ^uint64(0)
	}
	return 1 << bits
}
