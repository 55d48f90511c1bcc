package ipam

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// ReleaseIPs frees the given addresses. Addresses that were not allocated
// (or lie in no block) are returned as unallocated; that is not an error.
// Handles are decremented after their block is written. A block left
// empty and without affinity is deleted.
func (a *Allocator) ReleaseIPs(ctx context.Context, ips ...netip.Addr) (unallocated []netip.Addr, err error) {
	opts := make([]ReleaseOptions, len(ips))
	for i, ip := range ips {
		opts[i].Address = ip
	}
	return a.Release(ctx, opts...)
}

// Release frees each address whose allocation still matches its options
// (see ReleaseOptions), as ReleaseIPs does; an address not allocated, or
// allocated otherwise than its options say, is returned as unallocated and
// left alone.
func (a *Allocator) Release(ctx context.Context, opts ...ReleaseOptions) (unallocated []netip.Addr, err error) {
	if len(opts) == 0 {
		return nil, nil
	}
	var pools []pool
	var coolFrom time.Time
	if err := parallel(
		func() (err error) { pools, err = a.listPools(ctx); return },
		func() (err error) { coolFrom, err = a.coolFrom(ctx); return },
	); err != nil {
		return nil, fmt.Errorf("release IPs: %w", err)
	}
	byBlock := map[netip.Prefix][]ReleaseOptions{}
	var unknown []ReleaseOptions
	for _, opt := range opts {
		opt.Address = opt.Address.Unmap()
		if p, ok := poolFor(pools, opt.Address); ok {
			c := p.blockFor(opt.Address)
			byBlock[c] = append(byBlock[c], opt)
		} else {
			unknown = append(unknown, opt)
		}
	}
	if len(unknown) > 0 {
		// The pool may be gone while its blocks remain: find them.
		found, rest, err := a.blocksHolding(ctx, unknown)
		if err != nil {
			return nil, fmt.Errorf("release IPs: %w", err)
		}
		for c, as := range found {
			byBlock[c] = append(byBlock[c], as...)
		}
		unallocated = append(unallocated, rest...)
	}
	var errs []error
	cidrs := slices.SortedFunc(maps.Keys(byBlock), func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	for _, c := range cidrs {
		notAllocated, err := a.releaseFromBlock(ctx, c, byBlock[c], coolFrom)
		unallocated = append(unallocated, notAllocated...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return unallocated, errors.Join(errs...)
}

// blocksHolding finds the existing blocks holding the addresses of opts,
// returning the addresses no block holds.
func (a *Allocator) blocksHolding(ctx context.Context, opts []ReleaseOptions) (map[netip.Prefix][]ReleaseOptions, []netip.Addr, error) {
	blocks, err := a.listBlocks(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	found := map[netip.Prefix][]ReleaseOptions{}
	var rest []netip.Addr
	for _, opt := range opts {
		i := slices.IndexFunc(blocks, func(sb storedBlock) bool { return sb.block.prefix.Contains(opt.Address) })
		if i < 0 {
			rest = append(rest, opt.Address)
			continue
		}
		c := blocks[i].block.prefix
		found[c] = append(found[c], opt)
	}
	return found, rest, nil
}

// releaseFromBlock frees addresses of block cidr with compare-and-swap
// (cooling down from coolFrom, when set), then decrements their handles.
func (a *Allocator) releaseFromBlock(ctx context.Context, cidr netip.Prefix, opts []ReleaseOptions, coolFrom time.Time) ([]netip.Addr, error) {
	key := blockKey(cidr)
	for attempt := 1; attempt <= maxRetries; attempt++ {
		b, rev, err := a.getBlock(ctx, key)
		if errors.Is(err, datastore.ErrNotFound) {
			addrs := make([]netip.Addr, len(opts))
			for i, o := range opts {
				addrs[i] = o.Address
			}
			return addrs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("releasing from block %s: %w", cidr, err)
		}
		freed, notAllocated := b.releaseIf(opts, coolFrom)
		if len(freed) == 0 {
			return notAllocated, nil
		}
		err = a.putBlock(ctx, key, b, rev)
		if err == nil {
			log.WithFields(log.Fields{"block": cidr, "released": len(opts) - len(notAllocated)}).Debug("Released addresses")
			var errs []error
			for h, n := range freed {
				if err := a.adjustHandle(ctx, h, cidr, -n); err != nil && !errors.Is(err, datastore.ErrNotFound) {
					errs = append(errs, err)
				}
			}
			return notAllocated, errors.Join(errs...)
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("releasing from block %s: %w", cidr, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("releasing from block %s: %w", cidr, ErrTooManyRetries)
}

// ReleaseByHandle frees every address held by handleID and deletes the
// handle. A handle that does not exist fails with an error matching
// datastore.ErrNotFound. Each of the handle's blocks is released together
// with the handle's count for it, in one transaction.
func (a *Allocator) ReleaseByHandle(ctx context.Context, handleID string) error {
	if err := checkName("handle ID", handleID); err != nil {
		return fmt.Errorf("release by handle: %w", err)
	}
	var cidrs []netip.Prefix
	var hkv datastore.KVPair
	var coolFrom time.Time
	if err := parallel(
		func() (err error) { cidrs, hkv, err = a.handleBlocks(ctx, handleID); return },
		func() (err error) { coolFrom, err = a.coolFrom(ctx); return },
	); err != nil {
		return fmt.Errorf("release by handle: %w", err)
	}
	badRecord := hkv.Revision != 0 && hkv.Value == nil
	if badRecord {
		// Its blocks were found by their allocations: release them
		// there, then delete the record.
		hkv = datastore.KVPair{Key: hkv.Key}
	}
	var errs []error
	for _, cidr := range cidrs {
		if err := a.releaseHandleInBlock(ctx, handleID, cidr, &hkv, coolFrom); err != nil {
			errs = append(errs, err)
		}
	}
	if badRecord && len(errs) == 0 {
		if err := a.kv.Delete(ctx, handleKey(handleID), 0); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("handle %q: deleting its record: %w", handleID, err))
		}
	}
	return errors.Join(errs...)
}

// releaseHandleInBlock frees handleID's addresses in one block and takes
// the block out of the handle (whose stored pair is *hkv, kept current),
// deleting the handle when it holds nothing else, in one transaction. A
// block left empty and without affinity is deleted with it.
func (a *Allocator) releaseHandleInBlock(ctx context.Context, handleID string, cidr netip.Prefix, hkv *datastore.KVPair, coolFrom time.Time) error {
	key := blockKey(cidr)
	b, rev, err := a.getBlock(ctx, key)
	if errors.Is(err, datastore.ErrNotFound) || errors.Is(err, errBadValue) {
		// Gone, or of no use (logged and counted): the handle only
		// loses its count for it.
		b = nil
	} else if err != nil {
		return fmt.Errorf("handle %q: block %s: %w", handleID, cidr, err)
	}
	for attempt := 1; attempt <= maxRetries; attempt++ {
		var conds []datastore.KVCond
		var ops []datastore.KVOp
		released := 0
		if b != nil {
			nb := b.clone()
			if released = nb.releaseHandle(handleID, coolFrom); released > 0 {
				conds = append(conds, datastore.KVCond{Key: key, Revision: rev})
				if nb.empty() && nb.host() == "" {
					ops = append(ops, datastore.KVOp{Key: key, Delete: true})
				} else {
					v, err := nb.encode()
					if err != nil {
						return err
					}
					ops = append(ops, datastore.KVOp{Key: key, Value: v})
				}
			}
		}
		var handleValue []byte
		if hkv.Revision != 0 {
			h, err := decodeHandle(*hkv)
			if err != nil {
				return err
			}
			if n := h.Block[cidr.String()] - released; released > 0 && n > 0 {
				h.Block[cidr.String()] = n
			} else {
				// All released, or a count an interrupted assignment
				// left with no address behind it.
				delete(h.Block, cidr.String())
			}
			conds = append(conds, datastore.KVCond{Key: hkv.Key, Revision: hkv.Revision})
			if len(h.Block) == 0 {
				ops = append(ops, datastore.KVOp{Key: hkv.Key, Delete: true})
			} else {
				if handleValue, err = h.encode(); err != nil {
					return err
				}
				ops = append(ops, datastore.KVOp{Key: hkv.Key, Value: handleValue})
			}
		}
		if len(ops) == 0 {
			return nil
		}
		newRev, current, err := a.kv.Txn(ctx, conds, ops)
		if err == nil {
			if hkv.Revision != 0 {
				if handleValue == nil {
					*hkv = datastore.KVPair{Key: hkv.Key}
				} else {
					*hkv = datastore.KVPair{Key: hkv.Key, Value: handleValue, Revision: newRev}
				}
			}
			if released > 0 {
				log.WithFields(log.Fields{"block": cidr, "handle": handleID, "released": released}).Debug("Released addresses by handle")
			}
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("handle %q: block %s: %w", handleID, cidr, err)
		}
		i := 0
		if released > 0 {
			now := current[0]
			if now.Revision == 0 {
				b = nil
			} else if now.Revision != rev {
				if b, err = a.decodeBlockAt(key, now.Value, now.Revision); err != nil {
					b = nil // of no use (logged and counted)
				}
				rev = now.Revision
			}
			i++
		}
		if i < len(current) {
			*hkv = current[i]
			hkv.Key = handleKey(handleID)
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
	return fmt.Errorf("handle %q: block %s: %w", handleID, cidr, ErrTooManyRetries)
}
