package ipam

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// IPsByHandle returns the addresses handleID holds, in address order. A
// handle that does not exist fails with an error matching
// datastore.ErrNotFound.
func (a *Allocator) IPsByHandle(ctx context.Context, handleID string) ([]netip.Addr, error) {
	if err := checkName("handle ID", handleID); err != nil {
		return nil, err
	}
	cidrs, _, err := a.handleBlocks(ctx, handleID)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, cidr := range cidrs {
		b, _, err := a.getBlock(ctx, blockKey(cidr))
		if errors.Is(err, datastore.ErrNotFound) || errors.Is(err, errBadValue) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("handle %q: %w", handleID, err)
		}
		for _, al := range b.allocations() {
			if al.HandleID == handleID {
				out = append(out, al.IP)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// GetAssignmentAttributes returns who holds ip: its handle and attributes.
// An address that is not allocated fails with ErrNotAssigned.
func (a *Allocator) GetAssignmentAttributes(ctx context.Context, ip netip.Addr) (Allocation, error) {
	ip = ip.Unmap()
	b, err := a.findBlock(ctx, ip)
	if err != nil {
		return Allocation{}, err
	}
	o, _ := b.ordinal(ip)
	idx := b.Allocations[o]
	if idx == nil {
		return Allocation{}, fmt.Errorf("address %s: %w", ip, ErrNotAssigned)
	}
	at := b.Attributes[*idx]
	if at.cooling() {
		return Allocation{}, fmt.Errorf("address %s: %w: %w (released at %s)", ip, ErrNotAssigned, ErrCoolingDown, *at.ReleasedAt)
	}
	return Allocation{IP: ip, HandleID: at.handle(), Attrs: maps.Clone(at.Secondary)}, nil
}

// findBlock reads the block holding ip, through its pool or, when no pool
// holds it any more, by scanning the blocks. No block fails with
// ErrNotAssigned.
func (a *Allocator) findBlock(ctx context.Context, ip netip.Addr) (*block, error) {
	pools, err := a.listPools(ctx)
	if err != nil {
		return nil, err
	}
	if p, ok := poolFor(pools, ip); ok {
		b, _, err := a.getBlock(ctx, blockKey(p.blockFor(ip)))
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, datastore.ErrNotFound) {
			return nil, fmt.Errorf("address %s: %w", ip, err)
		}
	}
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return nil, err
	}
	for _, sb := range blocks {
		if sb.block.prefix.Contains(ip) {
			return sb.block, nil
		}
	}
	return nil, fmt.Errorf("address %s: in no block: %w", ip, ErrNotAssigned)
}

// ListBlocks returns every block, IPv4 then IPv6, in address order, with
// its allocations.
func (a *Allocator) ListBlocks(ctx context.Context) ([]Block, error) {
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return nil, err
	}
	out := make([]Block, 0, len(blocks))
	for _, sb := range blocks {
		blk := Block{
			CIDR:        sb.block.prefix,
			Host:        sb.block.host(),
			Allocations: sb.block.allocations(),
			Free:        len(sb.block.Unallocated),
			Revision:    sb.rev,
		}
		for _, o := range sb.block.cooling() {
			blk.Cooling = append(blk.Cooling, sb.block.addr(o))
		}
		out = append(out, blk)
	}
	slices.SortFunc(out, func(x, y Block) int { return x.CIDR.Addr().Compare(y.CIDR.Addr()) })
	return out, nil
}
