package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxPasses bounds how often an auto-assignment starts over on fresh
// state after finding what it decided with outdated.
const maxPasses = 10

// errStale says a write failed because the snapshot, an affinity or the
// node's labels changed since they were read: decide again on fresh state.
var errStale = errors.New("IPAM state changed while deciding")

// errContended says a node's block kept changing under a cached pass: the
// node's concurrent assignments would do better spread over more blocks.
var errContended = errors.New("block contended")

// maxOpenBlocks is how many blocks with free addresses a node may hold
// before contended assignments stop claiming more to spread over.
const maxOpenBlocks = 8

// request is one family's share of an AutoAssign pass.
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
	conds     []datastore.KVCond
	// cached: the pass decides on cached state and only tries the node's
	// own blocks; anything more waits for a pass on fresh state.
	cached bool
	// spread: claim a new block before trying the node's own, as
	// the last pass found them contended.
	spread bool
	// yield: give up a contended block rather than queue for it, so
	// that a fresh pass claims another (spread).
	yield bool
	// hop: on a lost race, move on to the node's next block.
	hop bool
	// fresh: blocks whose cached value Prefetch read for this pass.
	fresh map[netip.Prefix]bool
	// handleKV is the handle as last read or written (Revision 0: absent).
	handleKV *datastore.KVPair
	// newHandle: the handle must not be written by anyone else.
	newHandle bool
	log       *log.Entry
}

// AutoAssign assigns args.Num4 IPv4 and args.Num6 IPv6 addresses for
// args.Hostname: from the node's blocks first, then from blocks it claims,
// then, unless strictAffinity is configured, borrowed from other blocks of
// the usable pools. Reserved addresses are never handed out.
//
// An Allocator that has assigned before first tries the node's blocks it
// knows with what it read last time, in one round trip when nothing has
// changed; every write is conditional on that state being current, and a
// pass on fresh state follows whenever it was not or did not suffice.
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
	outs := map[int]*Assignments{}
	if args.Num4 > 0 {
		outs[4] = &Assignments{IPVersion: 4, NumRequested: args.Num4}
	}
	if args.Num6 > 0 {
		outs[6] = &Assignments{IPVersion: 6, NumRequested: args.Num6}
	}
	result := func(failed int, err error) (*Assignments, *Assignments, error) {
		if failed == 4 {
			return outs[4], nil, err
		}
		return outs[4], outs[6], err
	}
	handleKV := &datastore.KVPair{Key: handleKey(args.HandleID)}
	if args.NewHandle {
		if args.HandleID == "" {
			return nil, nil, fmt.Errorf("auto-assign: a new handle needs a handle ID: %w", ErrInvalid)
		}
		if _, err := a.kv.Get(ctx, handleKV.Key); err == nil {
			return nil, nil, fmt.Errorf("auto-assign: handle %q exists: %w", args.HandleID, ErrAlreadyAssigned)
		} else if !errors.Is(err, datastore.ErrNotFound) {
			return nil, nil, fmt.Errorf("auto-assign: reading handle %q: %w", args.HandleID, err)
		}
	}
	useCache, spread := true, false
	for pass := 1; ; pass++ {
		st, err := a.passState(ctx, args, useCache)
		if err != nil {
			return result(0, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err))
		}
		base := request{
			host: args.Hostname, handle: args.HandleID, attrs: args.Attrs,
			reserved: st.snap.reserved, cfg: st.snap.cfg,
			maxBlocks: blockCap(args.MaxBlocksPerHost, st.snap.cfg.MaxBlocksPerHost),
			conds:     st.conds, cached: st.cached, fresh: st.fresh, handleKV: handleKV, log: logCtx,
			spread: spread && !st.cached, newHandle: args.NewHandle,
		}
		failed, err := a.assignFamilies(ctx, &base, args, intent, st, outs)
		short := false
		for _, o := range outs {
			short = short || len(o.IPs) < o.NumRequested
		}
		switch {
		case err == nil && !short:
			return result(0, nil)
		case st.cached && (err == nil || !isTransport(err)):
			// Cached state was not enough or not current: start over
			// on fresh state, keeping what was assigned.
			a.cache.forget()
			useCache, spread = false, errors.Is(err, errContended)
		case errors.Is(err, errStale) && pass < maxPasses:
			useCache = false
		case errors.Is(err, errStale):
			return result(failed, fmt.Errorf("auto-assign for node %q: state kept changing: %w", args.Hostname, ErrTooManyRetries))
		default:
			return result(failed, err)
		}
	}
}

// isTransport reports whether err is a datastore failure (not a decision
// such as no pool or no room), which a fresh pass would only repeat.
func isTransport(err error) bool {
	return !errors.Is(err, errStale) && !errors.Is(err, errContended) && !errors.Is(err, ErrNoPools) && !errors.Is(err, ErrExhausted) &&
		!errors.Is(err, ErrPoolNotUsable) && !isConflict(err) && !errors.Is(err, ErrTooManyRetries)
}

// passState is what one AutoAssign pass decides with.
type passState struct {
	snap   *snapshot
	affs   map[int][]Affinity
	labels map[string]string
	conds  []datastore.KVCond
	cached bool
	// fresh: the blocks Prefetch read just before (the pass is not
	// cached: Prefetch read the rest as the pass would have).
	fresh map[netip.Prefix]bool
}

// passState returns the cached snapshot and affinities when useCache and
// they are all there, else reads them afresh (and caches them).
func (a *Allocator) passState(ctx context.Context, args AutoAssignArgs, useCache bool) (*passState, error) {
	st := &passState{affs: map[int][]Affinity{}}
	versions := []int{}
	if args.Num4 > 0 {
		versions = append(versions, 4)
	}
	if args.Num6 > 0 {
		versions = append(versions, 6)
	}
	if useCache {
		st.fresh = a.prefetchedState(args.Hostname, versions, st)
	}
	if useCache && st.fresh == nil {
		if st.snap = a.cache.snapshot(); st.snap != nil {
			st.cached = true
			for _, v := range versions {
				affs, ok := a.cache.affinities(args.Hostname, v)
				st.affs[v], st.cached = affs, st.cached && ok
			}
		}
	}
	if !st.cached && st.fresh == nil {
		fns := []func() error{func() (err error) { st.snap, err = a.readSnapshot(ctx); return }}
		affs := make([][]Affinity, len(versions))
		for i, v := range versions {
			fns = append(fns, func() (err error) {
				affs[i], err = a.listAffinities(ctx, hostAffinitiesPrefix(args.Hostname, v))
				return
			})
		}
		if err := parallel(fns...); err != nil {
			return nil, err
		}
		a.cache.setSnapshot(st.snap)
		for i, v := range versions {
			st.affs[v] = affs[i]
			a.cache.setAffinities(args.Hostname, v, affs[i])
		}
	}
	st.conds = st.snap.conds
	if needsLabels(st.snap.pools, args) {
		labels, cond, err := a.nodeLabels(ctx, args.Hostname)
		if err != nil {
			return nil, err
		}
		st.labels = labels
		st.conds = append(slices.Clip(st.conds), cond)
	}
	return st, nil
}

// prefetchedState fills st from what Prefetch read for host just before,
// when it covers every version asked for, and returns the blocks it read
// (nil when there is nothing to use).
func (a *Allocator) prefetchedState(host string, versions []int, st *passState) map[netip.Prefix]bool {
	mark, ok := a.cache.takePrefetched(host)
	if !ok || time.Since(mark.at) > prefetchTTL {
		return nil
	}
	snap := a.cache.snapshot()
	if snap == nil {
		return nil
	}
	affs := map[int][]Affinity{}
	for _, v := range versions {
		got, ok := a.cache.affinities(host, v)
		if !ok || !slices.Contains(mark.versions, v) {
			return nil
		}
		affs[v] = got
	}
	st.snap, st.affs = snap, affs
	return mark.blocks
}

// assignFamilies runs one pass for each requested family and returns the
// version that failed, if any.
func (a *Allocator) assignFamilies(ctx context.Context, base *request, args AutoAssignArgs, intent Intent, st *passState, outs map[int]*Assignments) (int, error) {
	for _, v := range []int{4, 6} {
		out, ok := outs[v]
		if !ok || len(out.IPs) == out.NumRequested {
			continue
		}
		requested := args.IPv4Pools
		if v == 6 {
			requested = args.IPv6Pools
		}
		r := *base
		r.version, r.num, r.affs = v, out.NumRequested, st.affs[v]
		var err error
		if r.pools, err = choosePools(st.snap.pools, v, requested, st.labels, args.NamespaceLabels, intent); err != nil {
			return v, fmt.Errorf("auto-assign for node %q: %w", args.Hostname, err)
		}
		if err := a.assignFamily(ctx, &r, out); err != nil {
			return v, err
		}
	}
	return 0, nil
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

// assignFamily hands out addresses of one IP version until out holds
// r.num of them. A pass on cached state only tries the node's own blocks
// and reports no shortfall.
func (a *Allocator) assignFamily(ctx context.Context, r *request, out *Assignments) error {
	need := func() int { return r.num - len(out.IPs) }
	take := func(cidr netip.Prefix, first *storedBlock, own bool, aff *Affinity) error {
		got, err := a.assignFromBlock(ctx, r, cidr, need(), own, aff, first)
		out.IPs = append(out.IPs, got...)
		return err
	}

	owned, open := 0, 0
	affs := slices.Clone(r.affs)
	slices.SortStableFunc(affs, func(x, y Affinity) int { return cmp.Compare(y.Revision, x.Revision) })
	var mine []Affinity // in the order to try them
	for _, p := range r.pools {
		for _, aff := range affs {
			if aff.State == AffinityPendingDeletion || !p.cidr.Contains(aff.CIDR.Addr()) {
				continue
			}
			owned++
			if aff.State != AffinityConfirmed || r.reserved.covers(aff.CIDR) {
				continue
			}
			mine = append(mine, aff)
			if free, known := a.cache.free(aff.CIDR); !known || free > 0 {
				open++
			}
		}
	}
	r.yield = r.cached && r.cfg.AutoAllocateBlocks && open < maxOpenBlocks && owned < r.maxBlocks
	if r.cached && open > 1 {
		// Concurrent assignments for the node (other Allocators) each
		// start at their own block with room, so they rarely race.
		mine = a.cache.spreadOrder(r.host, mine)
	}

	// claim claims up to max new blocks for the node and assigns from
	// them.
	var taken map[netip.Prefix]bool
	claim := func(max int) error {
		if taken == nil {
			var err error
			if taken, err = a.existingBlocks(ctx, r.version); err != nil {
				return err
			}
		}
		for claimed := 0; need() > 0 && owned < r.maxBlocks && claimed < max; {
			// A concurrent assignment for this node may have claimed a
			// block since this pass read the node's affinities: use it
			// rather than claim one more. (Its affinity is written
			// before its block, so this read, after the blocks', sees
			// every claim whose block the blocks' read saw.)
			adopted, err := a.adoptConcurrentClaims(ctx, r, take)
			if err != nil {
				return err
			}
			owned += adopted
			if need() == 0 || owned >= r.maxBlocks {
				return nil
			}
			cidr, ok := findFreeBlock(r.pools, r.host, taken, r.reserved)
			if !ok {
				r.log.WithField("version", r.version).Info("No unclaimed block left in the usable pools")
				return nil
			}
			taken[cidr] = true
			b, rev, aff, err := a.claimBlock(ctx, r.host, cidr)
			if errors.Is(err, errBlockTaken) {
				continue
			}
			if err != nil {
				return err
			}
			owned++
			claimed++
			r.affs = append(slices.Clip(r.affs), aff)
			a.cache.setAffinities(r.host, r.version, r.affs)
			if err := take(cidr, &storedBlock{block: b, key: blockKey(cidr), rev: rev}, true, nil); err != nil {
				return err
			}
		}
		return nil
	}

	// 0. When the node's blocks were contended, one more block to
	// spread its concurrent assignments over.
	if r.spread && r.cfg.AutoAllocateBlocks && open < maxOpenBlocks {
		var err error
		if taken, err = a.existingBlocks(ctx, r.version); err != nil {
			return err
		}
		// Only where blocks are plentiful: spreading must never leave
		// another node short of a block of its own.
		if mostlyUnclaimed(r.pools, taken) {
			if err := claim(1); err != nil {
				return err
			}
		}
	}

	// 1. Blocks the node already owns, in pool order, the most recently
	// claimed first: older ones are the likeliest to be full, and each
	// one tried costs a read.
	// A cached pass moves on from a block it loses a race on while
	// other blocks with room remain, and comes back to it last.
	var contended []Affinity
	for i, aff := range mine {
		if need() == 0 {
			break
		}
		r.hop = r.cached && open > 1 && i < len(mine)-1
		err := take(aff.CIDR, nil, true, &aff)
		if errors.Is(err, errContended) {
			contended = append(contended, aff)
			continue
		}
		if err != nil {
			return err
		}
	}
	r.hop = false
	if need() > 0 && len(contended) > 0 {
		for _, aff := range contended {
			if need() == 0 {
				break
			}
			if err := take(aff.CIDR, nil, true, &aff); err != nil {
				return err
			}
		}
	}
	if r.cached {
		return nil
	}

	// 2. New blocks, claimed for the node.
	if need() > 0 && r.cfg.AutoAllocateBlocks {
		if err := claim(r.maxBlocks); err != nil {
			return err
		}
	}

	// 3. Borrowed addresses from other blocks of the pools.
	if need() > 0 && !r.cfg.StrictAffinity {
		blocks, err := a.listBlocks(ctx, r.version)
		if err != nil {
			return err
		}
		for _, p := range r.pools {
			for _, sb := range blocks {
				if need() == 0 {
					break
				}
				if !p.cidr.Contains(sb.block.prefix.Addr()) || sb.block.numFree(r.reserved.skip()) == 0 {
					continue
				}
				if err := take(sb.block.prefix, &sb, false, nil); err != nil {
					return err
				}
			}
		}
	}

	if need() > 0 {
		names := make([]string, len(r.pools))
		for i, p := range r.pools {
			names[i] = p.name
		}
		return fmt.Errorf("node %q: IPv%d pool exhausted: assigned %d of %d requested addresses from pools %v (max %d blocks per node, strictAffinity %t): %w",
			r.host, r.version, len(out.IPs), r.num, names, r.maxBlocks, r.cfg.StrictAffinity, ErrExhausted)
	}
	return nil
}

// adoptConcurrentClaims reads the node's affinities again and assigns
// from the blocks of the usable pools that it finds claimed for the node
// since the pass read them (finishing a claim still pending, as
// claimBlock does for the node's own claims). It returns how many blocks
// it adopted.
func (a *Allocator) adoptConcurrentClaims(ctx context.Context, r *request, take func(netip.Prefix, *storedBlock, bool, *Affinity) error) (int, error) {
	now, err := a.listAffinities(ctx, hostAffinitiesPrefix(r.host, r.version))
	if err != nil {
		return 0, err
	}
	known := make(map[netip.Prefix]bool, len(r.affs))
	for _, aff := range r.affs {
		known[aff.CIDR] = true
	}
	adopted := 0
	for _, aff := range now {
		if known[aff.CIDR] || aff.State == AffinityPendingDeletion || r.reserved.covers(aff.CIDR) ||
			!slices.ContainsFunc(r.pools, func(p pool) bool { return p.cidr.Contains(aff.CIDR.Addr()) }) {
			continue
		}
		r.log.WithField("block", aff.CIDR).Debug("Using a block claimed for the node by a concurrent assignment")
		var first *storedBlock
		if aff.State != AffinityConfirmed {
			b, rev, confirmed, err := a.claimBlock(ctx, r.host, aff.CIDR)
			if errors.Is(err, errBlockTaken) {
				continue
			}
			if err != nil {
				return adopted, err
			}
			aff, first = confirmed, &storedBlock{block: b, key: blockKey(aff.CIDR), rev: rev}
		}
		adopted++
		r.affs = append(slices.Clip(r.affs), aff)
		a.cache.setAffinities(r.host, r.version, r.affs)
		if err := take(aff.CIDR, first, true, &aff); err != nil && !errors.Is(err, errContended) {
			return adopted, err
		}
	}
	return adopted, nil
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

// assignFromBlock assigns up to n addresses from the block cidr: one of
// the node's own blocks when own is set (it must still be affine to the
// node, and aff, when set, must be unchanged), otherwise a borrowed one.
// first, when set, is the block as last read. The block, the handle and the pass's
// conditions are written in one transaction: the addresses and the
// handle's count of them appear together or not at all. A lost race
// retries with the values the transaction read back; a change to the
// pass's state fails with errStale. A block that is gone, full, or affine
// to another node yields no address and no error.
func (a *Allocator) assignFromBlock(ctx context.Context, r *request, cidr netip.Prefix, n int, own bool, aff *Affinity, first *storedBlock) ([]netip.Prefix, error) {
	key := blockKey(cidr)
	var cur *block // the block as last read, never changed
	var rev int64
	switch {
	case first != nil:
		cur, rev = first.block, first.rev
	case r.cached || r.fresh[cidr]:
		if sb, ok := a.cache.block(cidr); ok {
			cur, rev = sb.block, sb.rev
		}
	}
	conds := make([]datastore.KVCond, 0, 3+len(r.conds))
	for attempt := 1; attempt <= maxRetries; attempt++ {
		if cur == nil {
			var err error
			cur, rev, err = a.getBlock(ctx, key)
			if errors.Is(err, datastore.ErrNotFound) || errors.Is(err, errBadValue) {
				return nil, nil // gone, or of no use (logged and counted)
			}
			if err != nil {
				return nil, fmt.Errorf("block %s: %w", cidr, err)
			}
		}
		if own && cur.host() != r.host {
			if r.cached && attempt == 1 {
				return nil, errStale // the cached value may be old
			}
			return nil, nil
		}
		b := cur.clone()
		// Addresses whose cooldown (ipCooldownSeconds) has passed are
		// free again, in the order they were released.
		b.reclaim(time.Now(), r.cfg.IPCooldown)
		addrs := b.assign(n, r.handle, r.attrs, r.reserved.skip())
		if len(addrs) == 0 {
			a.cache.setBlock(cidr, cur, rev)
			return nil, nil
		}
		value, err := b.encode()
		if err != nil {
			return nil, err
		}
		conds = append(conds[:0], datastore.KVCond{Key: key, Revision: rev})
		ops := []datastore.KVOp{{Key: key, Value: value}}
		var handleValue []byte
		if r.handle != "" {
			if handleValue, err = a.countHandle(*r.handleKV, r.handle, cidr, len(addrs)); err != nil {
				return nil, err
			}
			conds = append(conds, datastore.KVCond{Key: r.handleKV.Key, Revision: r.handleKV.Revision})
			ops = append(ops, datastore.KVOp{Key: r.handleKV.Key, Value: handleValue})
		}
		if aff != nil {
			conds = append(conds, datastore.KVCond{Key: affinityKey(aff.Host, aff.CIDR), Revision: aff.Revision})
		}
		conds = append(conds, r.conds...)
		newRev, current, err := a.kv.Txn(ctx, conds, ops)
		if err == nil {
			a.cache.setBlock(cidr, b, newRev)
			if own {
				a.cache.prefer(r.host, cidr)
			}
			if r.handle != "" {
				*r.handleKV = datastore.KVPair{Key: r.handleKV.Key, Value: handleValue, Revision: newRev}
			}
			out := make([]netip.Prefix, len(addrs))
			for i, ad := range addrs {
				out[i] = netip.PrefixFrom(ad, cidr.Bits())
			}
			r.log.WithFields(log.Fields{"block": cidr, "ips": addrs}).Debug("Assigned addresses")
			return out, nil
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("writing block %s: %w", cidr, err)
		}
		raced, blockRaced := false, false
		if now := current[0]; now.Revision != rev {
			raced, blockRaced = true, true
			if now.Revision == 0 {
				a.cache.setBlock(cidr, nil, 0)
				return nil, nil // the block was deleted
			}
			if cur, err = a.decodeBlockAt(key, now.Value, now.Revision); err != nil {
				a.cache.setBlock(cidr, nil, 0)
				return nil, nil // of no use (logged and counted)
			}
			rev = now.Revision
			a.cache.setBlock(cidr, cur, rev)
		}
		if r.handle != "" && current[1].Revision != r.handleKV.Revision {
			if r.newHandle {
				return nil, fmt.Errorf("handle %q was created by another assignment: %w", r.handle, ErrAlreadyAssigned)
			}
			raced, *r.handleKV = true, current[1]
		}
		if !raced {
			return nil, errStale
		}
		if own && blockRaced && (r.hop || (r.yield && attempt >= 2)) {
			return nil, errContended
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("block %s: %w", cidr, ErrTooManyRetries)
}

// existingBlocks returns the CIDRs of every block of an IP version, from
// their keys alone.
func (a *Allocator) existingBlocks(ctx context.Context, version int) (map[netip.Prefix]bool, error) {
	kvs, _, err := a.kv.List(ctx, blocksFamilyPrefix(version))
	if err != nil {
		return nil, fmt.Errorf("listing blocks: %w", err)
	}
	out := make(map[netip.Prefix]bool, len(kvs))
	for _, p := range kvs {
		c, err := parseBlockKey(p.Key)
		if err != nil {
			return nil, err
		}
		out[c] = true
	}
	return out, nil
}

// mostlyUnclaimed reports whether at least half of the pools' blocks are
// still unclaimed.
func mostlyUnclaimed(pools []pool, taken map[netip.Prefix]bool) bool {
	var total uint64
	for _, p := range pools {
		total += p.blockIndexLimit()
	}
	used := uint64(0)
	for c := range taken {
		for _, p := range pools {
			if p.cidr.Contains(c.Addr()) {
				used++
				break
			}
		}
	}
	return used*2 <= total
}
