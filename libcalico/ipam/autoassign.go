package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// request is one family's share of an AutoAssign.
type request struct {
	version   int
	num       int
	host      string
	handle    string
	attrs     map[string]string
	pools     []pool
	reserved  reservations
	cfg       Config
	maxBlocks int
	affs      []Affinity // host's affinities of this version
	log       *log.Entry
}

// AutoAssign assigns args.Num4 IPv4 and args.Num6 IPv6 addresses for
// args.Hostname: from the node's blocks first, then from blocks it claims,
// then, unless strictAffinity is configured, borrowed from other blocks of
// the usable pools. Reserved addresses are never handed out.
//
// When fewer addresses than requested are available, the addresses that
// were assigned are returned together with an error wrapping ErrExhausted;
// the caller releases them (by handle) if it cannot use them.
func (a *Allocator) AutoAssign(ctx context.Context, args AutoAssignArgs) (v4, v6 *Assignments, err error) {
	if err := checkName("host name", args.Hostname); err != nil {
		return nil, nil, fmt.Errorf("auto-assign: %w", err)
	}
	if args.HandleID != "" {
		if err := checkName("handle ID", args.HandleID); err != nil {
			return nil, nil, fmt.Errorf("auto-assign: %w", err)
		}
	}
	if args.Num4 < 0 || args.Num6 < 0 {
		return nil, nil, fmt.Errorf("auto-assign: negative address count (%d IPv4, %d IPv6): %w", args.Num4, args.Num6, ErrInvalid)
	}
	intent := args.Intent
	if intent == "" {
		intent = IntentWorkload
	}
	logCtx := log.WithFields(log.Fields{"node": args.Hostname, "handle": args.HandleID})

	var (
		pools        []pool
		reserved     reservations
		cfg          Config
		affs4, affs6 []Affinity
	)
	err = parallel(
		func() (err error) { pools, err = a.listPools(ctx); return },
		func() (err error) { reserved, err = a.listReservations(ctx); return },
		func() (err error) { cfg, err = a.GetConfig(ctx); return },
		func() (err error) {
			if args.Num4 > 0 {
				affs4, err = a.listAffinities(ctx, hostAffinitiesPrefix(args.Hostname, 4))
			}
			return
		},
		func() (err error) {
			if args.Num6 > 0 {
				affs6, err = a.listAffinities(ctx, hostAffinitiesPrefix(args.Hostname, 6))
			}
			return
		},
	)
	if err != nil {
		return nil, nil, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err)
	}

	var labels map[string]string
	if needsLabels(pools, args) {
		if labels, err = a.nodeLabels(ctx, args.Hostname); err != nil {
			return nil, nil, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err)
		}
	}

	base := request{
		host:      args.Hostname,
		handle:    args.HandleID,
		attrs:     args.Attrs,
		reserved:  reserved,
		cfg:       cfg,
		maxBlocks: blockCap(args.MaxBlocksPerHost, cfg.MaxBlocksPerHost),
		log:       logCtx,
	}
	if args.Num4 > 0 {
		r := base
		r.version, r.num, r.affs = 4, args.Num4, affs4
		if r.pools, err = choosePools(pools, 4, args.IPv4Pools, labels, intent); err != nil {
			return nil, nil, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err)
		}
		if v4, err = a.assignFamily(ctx, &r); err != nil {
			return v4, nil, err
		}
	}
	if args.Num6 > 0 {
		r := base
		r.version, r.num, r.affs = 6, args.Num6, affs6
		if r.pools, err = choosePools(pools, 6, args.IPv6Pools, labels, intent); err != nil {
			return v4, nil, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err)
		}
		if v6, err = a.assignFamily(ctx, &r); err != nil {
			return v4, v6, err
		}
	}
	return v4, v6, nil
}

// needsLabels reports whether pool selection must read the node's labels:
// only when some pool of a family chosen without explicit pools has a
// node selector.
func needsLabels(pools []pool, args AutoAssignArgs) bool {
	for _, p := range pools {
		if p.selector == nil {
			continue
		}
		if (p.version() == 4 && args.Num4 > 0 && len(args.IPv4Pools) == 0) ||
			(p.version() == 6 && args.Num6 > 0 && len(args.IPv6Pools) == 0) {
			return true
		}
	}
	return false
}

// assignFamily hands out r.num addresses of one IP version.
func (a *Allocator) assignFamily(ctx context.Context, r *request) (*Assignments, error) {
	out := &Assignments{IPVersion: r.version, NumRequested: r.num}
	need := func() int { return r.num - len(out.IPs) }
	take := func(cidr netip.Prefix, first *storedBlock, wantHost string) error {
		got, err := a.assignFromBlock(ctx, r, cidr, need(), wantHost, first)
		out.IPs = append(out.IPs, got...)
		return err
	}

	// 1. Blocks the node already owns, in pool order, the most recently
	// claimed first: older ones are the likeliest to be full, and each
	// one tried costs a read.
	owned := 0
	affs := slices.Clone(r.affs)
	slices.SortStableFunc(affs, func(x, y Affinity) int { return cmp.Compare(y.Revision, x.Revision) })
	for _, p := range r.pools {
		for _, aff := range affs {
			if aff.State == AffinityPendingDeletion || !p.cidr.Contains(aff.CIDR.Addr()) {
				continue
			}
			owned++
			if aff.State != AffinityConfirmed || need() == 0 || r.reserved.covers(aff.CIDR) {
				continue
			}
			if err := take(aff.CIDR, nil, r.host); err != nil {
				return out, err
			}
		}
	}

	// 2. New blocks, claimed for the node.
	var listed []storedBlock
	if need() > 0 && r.cfg.AutoAllocateBlocks {
		var err error
		if listed, err = a.listBlocks(ctx, r.version); err != nil {
			return out, err
		}
		taken := make(map[netip.Prefix]bool, len(listed))
		for _, sb := range listed {
			taken[sb.block.prefix] = true
		}
		for need() > 0 && owned < r.maxBlocks {
			cidr, ok := findFreeBlock(r.pools, r.host, taken, r.reserved)
			if !ok {
				r.log.WithField("version", r.version).Info("No unclaimed block left in the usable pools")
				break
			}
			taken[cidr] = true
			b, rev, err := a.claimBlock(ctx, r.host, cidr)
			if errors.Is(err, errBlockTaken) {
				continue
			}
			if err != nil {
				return out, err
			}
			owned++
			if err := take(cidr, &storedBlock{block: b, key: blockKey(cidr), rev: rev}, r.host); err != nil {
				return out, err
			}
		}
	}

	// 3. Borrowed addresses from other blocks of the pools.
	if need() > 0 && !r.cfg.StrictAffinity {
		blocks, err := a.listBlocks(ctx, r.version)
		if err != nil {
			return out, err
		}
		for _, p := range r.pools {
			for _, sb := range blocks {
				if need() == 0 {
					break
				}
				if !p.cidr.Contains(sb.block.prefix.Addr()) || sb.block.numFree(r.reserved.skip()) == 0 {
					continue
				}
				if err := take(sb.block.prefix, &sb, ""); err != nil {
					return out, err
				}
			}
		}
	}

	if need() > 0 {
		return out, fmt.Errorf("node %q: assigned %d of %d requested IPv%d addresses (max %d blocks per node, strictAffinity %t): %w",
			r.host, len(out.IPs), r.num, r.version, r.maxBlocks, r.cfg.StrictAffinity, ErrExhausted)
	}
	return out, nil
}

// findFreeBlock returns the first block, in pool order and then in the
// node's claim order, that no one has and that is not wholly reserved.
func findFreeBlock(pools []pool, host string, taken map[netip.Prefix]bool, reserved reservations) (netip.Prefix, bool) {
	var found netip.Prefix
	for _, p := range pools {
		p.candidateBlocks(host, func(c netip.Prefix) bool {
			if taken[c] || reserved.covers(c) {
				return true
			}
			found = c
			return false
		})
		if found.IsValid() {
			return found, true
		}
	}
	return netip.Prefix{}, false
}

// assignFromBlock assigns up to n addresses from the block cidr, which must
// be affine to wantHost unless that is "" (borrowing). first, when set, is
// a copy of the block to try before reading it. A block that is gone,
// full, or affine to another node yields no address and no error.
func (a *Allocator) assignFromBlock(ctx context.Context, r *request, cidr netip.Prefix, n int, wantHost string, first *storedBlock) ([]netip.Prefix, error) {
	key := blockKey(cidr)
	credit := 0 // what the handle has been incremented by for this block
	settle := func(used int) error {
		return a.adjustHandle(ctx, r.handle, cidr, used-credit)
	}
	for attempt := 1; attempt <= maxRetries; attempt++ {
		var b *block
		var rev int64
		if attempt == 1 && first != nil {
			b, rev = first.block, first.rev
		} else {
			var err error
			if attempt == 1 && r.handle != "" {
				// Count the handle while the block is read rather than
				// between reading and writing it: the shorter the
				// read-modify-write window, the fewer lost races. A
				// block with less room gives the excess back below.
				var herr error
				err = parallel(
					func() (err error) { b, rev, err = a.getBlock(ctx, key); return },
					func() error { herr = a.adjustHandle(ctx, r.handle, cidr, n); return nil },
				)
				if herr != nil {
					return nil, errors.Join(fmt.Errorf("block %s: %w", cidr, herr), settle(0))
				}
				credit = n
			} else {
				b, rev, err = a.getBlock(ctx, key)
			}
			if errors.Is(err, datastore.ErrNotFound) {
				return nil, settle(0)
			}
			if err != nil {
				return nil, errors.Join(fmt.Errorf("block %s: %w", cidr, err), settle(0))
			}
		}
		if wantHost != "" && b.host() != wantHost {
			return nil, settle(0)
		}
		addrs := b.assign(n, r.handle, r.attrs, r.reserved.skip())
		if len(addrs) == 0 {
			return nil, settle(0)
		}
		if credit < len(addrs) {
			if err := a.adjustHandle(ctx, r.handle, cidr, len(addrs)-credit); err != nil {
				return nil, errors.Join(fmt.Errorf("block %s: %w", cidr, err), settle(0))
			}
			credit = len(addrs)
		}
		err := a.putBlock(ctx, key, b, rev)
		if err == nil {
			out := make([]netip.Prefix, len(addrs))
			for i, ad := range addrs {
				out[i] = netip.PrefixFrom(ad, cidr.Bits())
			}
			r.log.WithFields(log.Fields{"block": cidr, "ips": addrs}).Debug("Assigned addresses")
			return out, settle(len(addrs))
		}
		if !isConflict(err) && !errors.Is(err, datastore.ErrNotFound) {
			return nil, errors.Join(fmt.Errorf("writing block %s: %w", cidr, err), settle(0))
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, errors.Join(err, settle(0))
		}
	}
	return nil, errors.Join(fmt.Errorf("block %s: %w", cidr, ErrTooManyRetries), settle(0))
}
