package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// affinityValue is an affinity as stored, in Calico's JSON shape.
type affinityValue struct {
	State   AffinityState `json:"state"`
	Deleted bool          `json:"deleted"`
}

// encodeAffinity serialises an affinity state.
func encodeAffinity(s AffinityState) []byte {
	v, _ := json.Marshal(affinityValue{State: s})
	return v
}

// decodeAffinity parses a stored affinity; an empty value (as very old
// Calico wrote) is confirmed.
func decodeAffinity(p datastore.KVPair) (Affinity, error) {
	host, cidr, err := parseAffinityKey(p.Key)
	if err != nil {
		return Affinity{}, err
	}
	aff := Affinity{Host: host, CIDR: cidr, State: AffinityConfirmed, Revision: p.Revision}
	if len(p.Value) > 0 {
		var v affinityValue
		if err := json.Unmarshal(p.Value, &v); err != nil {
			return Affinity{}, fmt.Errorf("key %q: decoding affinity: %w", p.Key, err)
		}
		if v.State != "" {
			aff.State = v.State
		}
	}
	return aff, nil
}

// listAffinities reads the affinities under prefix.
func (a *Allocator) listAffinities(ctx context.Context, prefix string) ([]Affinity, error) {
	kvs, _, err := a.kv.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing affinities: %w", err)
	}
	out := make([]Affinity, 0, len(kvs))
	for _, p := range kvs {
		aff, err := decodeAffinity(p)
		if err != nil {
			// Logged and counted; the node cannot use the block through
			// it (a claim of the block finds the key taken).
			a.skip(p.Key, badAffinity, p.Revision, err)
			continue
		}
		out = append(out, aff)
	}
	return out, nil
}

// ListAffinities returns every node's affinities, sorted by key.
func (a *Allocator) ListAffinities(ctx context.Context) ([]Affinity, error) {
	return a.listAffinities(ctx, affinitiesPrefix)
}

// errBlockTaken says the block a node tried to claim belongs to another.
var errBlockTaken = errors.New("block claimed by another node")

// claimBlock claims the block cidr for host: it records a pending
// affinity, creates the block affine to host, then confirms the affinity.
// When host's own earlier or concurrent claim got there first, the block
// is simply adopted. It returns errBlockTaken when another node owns the
// block (its own pending affinity then removed), and otherwise the block,
// its revision and the confirmed affinity.
func (a *Allocator) claimBlock(ctx context.Context, host string, cidr netip.Prefix) (*block, int64, Affinity, error) {
	affKey := affinityKey(host, cidr)
	logCtx := log.WithFields(log.Fields{"node": host, "block": cidr})
	var aff datastore.KVPair
	createdAffinity := false
	for attempt := 1; ; attempt++ {
		var err error
		aff, err = a.kv.Create(ctx, datastore.KVPair{Key: affKey, Value: encodeAffinity(AffinityPending)})
		if err == nil {
			createdAffinity = true
			break
		}
		if !errors.Is(err, datastore.ErrAlreadyExists) {
			return nil, 0, Affinity{}, fmt.Errorf("claiming block %s for node %q: %w", cidr, host, err)
		}
		// Our node already has an affinity here: an earlier claim that
		// did not finish, or one running now. Carry on and adopt it —
		// unless that claim gave up and removed it meanwhile: then try
		// to create it again.
		aff, err = a.kv.Get(ctx, affKey)
		if errors.Is(err, datastore.ErrNotFound) && attempt < maxRetries {
			continue
		}
		if err != nil {
			return nil, 0, Affinity{}, fmt.Errorf("claiming block %s for node %q: %w", cidr, host, err)
		}
		if v, err := decodeAffinity(aff); err != nil || v.State == AffinityPendingDeletion {
			return nil, 0, Affinity{}, errBlockTaken
		}
		break
	}

	b := newBlock(cidr, host)
	v, err := b.encode()
	if err != nil {
		return nil, 0, Affinity{}, err
	}
	key := blockKey(cidr)
	created, err := a.kv.Create(ctx, datastore.KVPair{Key: key, Value: v})
	rev := created.Revision
	if errors.Is(err, datastore.ErrAlreadyExists) {
		var existing *block
		existing, rev, err = a.getBlock(ctx, key)
		if errors.Is(err, errBadValue) || (err == nil && existing.host() != host) {
			// Another node's block, or one that does not decode (of no
			// use to anyone, and never overwritten).
			if err == nil {
				logCtx.WithField("owner", existing.host()).Debug("Block already claimed by another node")
			}
			if createdAffinity {
				if derr := a.kv.Delete(ctx, affKey, aff.Revision); derr != nil && !errors.Is(derr, datastore.ErrNotFound) {
					logCtx.WithError(derr).Warn("Could not remove pending affinity of a lost claim")
				}
			}
			return nil, 0, Affinity{}, errBlockTaken
		}
		b = existing
	}
	if err != nil {
		return nil, 0, Affinity{}, fmt.Errorf("claiming block %s for node %q: %w", cidr, host, err)
	}
	affRev, err := a.confirmAffinity(ctx, affKey, aff.Revision)
	if err != nil {
		return nil, 0, Affinity{}, fmt.Errorf("confirming affinity of node %q to block %s: %w", host, cidr, err)
	}
	logCtx.Info("Claimed block")
	return b, rev, Affinity{Host: host, CIDR: cidr, State: AffinityConfirmed, Revision: affRev}, nil
}

// confirmAffinity marks an affinity confirmed, recreating it when it was
// removed while the block was being created, and returns its revision.
func (a *Allocator) confirmAffinity(ctx context.Context, key string, rev int64) (int64, error) {
	value := encodeAffinity(AffinityConfirmed)
	for attempt := 1; attempt <= maxRetries; attempt++ {
		p, err := a.kv.Update(ctx, datastore.KVPair{Key: key, Value: value, Revision: rev})
		if err == nil {
			return p.Revision, nil
		}
		if errors.Is(err, datastore.ErrNotFound) {
			p, err = a.kv.Create(ctx, datastore.KVPair{Key: key, Value: value})
			if err == nil {
				return p.Revision, nil
			}
			if !errors.Is(err, datastore.ErrAlreadyExists) {
				return 0, err
			}
		} else if !isConflict(err) {
			return 0, err
		}
		p, err = a.kv.Get(ctx, key)
		if err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return 0, err
		}
		cur, derr := decodeAffinity(p)
		if err == nil && derr == nil && cur.State == AffinityConfirmed {
			return p.Revision, nil
		}
		rev = p.Revision
	}
	return 0, ErrTooManyRetries
}

// ReleaseHostAffinities releases every block affinity of host: its empty
// blocks are deleted, blocks still holding addresses lose their affinity
// (and are deleted once their last address is released).
func (a *Allocator) ReleaseHostAffinities(ctx context.Context, host string) error {
	if err := checkName("host name", host); err != nil {
		return err
	}
	affs, err := a.listAffinities(ctx, affinitiesPrefix+host+"/")
	if err != nil {
		return err
	}
	return a.releaseAffinities(ctx, affs)
}

// ReleasePoolAffinities releases every node's affinities to blocks of the
// pool named by name or CIDR, as ReleaseHostAffinities does.
func (a *Allocator) ReleasePoolAffinities(ctx context.Context, nameOrCIDR string) error {
	pools, err := a.listPools(ctx)
	if err != nil {
		return err
	}
	var cidr netip.Prefix
	if p, ok := findPool(pools, nameOrCIDR); ok {
		cidr = p.cidr
	} else if cidr, err = netip.ParsePrefix(nameOrCIDR); err != nil {
		return fmt.Errorf("pool %q: no such pool and not a CIDR: %w", nameOrCIDR, ErrPoolNotUsable)
	}
	all, err := a.ListAffinities(ctx)
	if err != nil {
		return err
	}
	var affs []Affinity
	for _, aff := range all {
		if cidr.Overlaps(aff.CIDR) && aff.CIDR.Bits() >= cidr.Bits() {
			affs = append(affs, aff)
		}
	}
	return a.releaseAffinities(ctx, affs)
}

// releaseAffinities releases each affinity, carrying on past failures and
// returning them all.
func (a *Allocator) releaseAffinities(ctx context.Context, affs []Affinity) error {
	var errs []error
	for _, aff := range affs {
		if err := a.releaseAffinity(ctx, aff, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseAffinity releases one affinity: it is marked pendingDeletion so
// allocators stop using it, the block is deleted when empty or otherwise
// loses its affinity, and the affinity is deleted. With onlyEmpty, a block
// holding addresses keeps its affinity, which is put back to confirmed.
// It reports errBlockNotEmpty in that case.
func (a *Allocator) releaseAffinity(ctx context.Context, aff Affinity, onlyEmpty bool) error {
	affKey := affinityKey(aff.Host, aff.CIDR)
	logCtx := log.WithFields(log.Fields{"node": aff.Host, "block": aff.CIDR})
	rev, err := a.markPendingDeletion(ctx, affKey)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing affinity of node %q to block %s: %w", aff.Host, aff.CIDR, err)
	}
	key := blockKey(aff.CIDR)
	for attempt := 1; ; attempt++ {
		if attempt > maxRetries {
			return fmt.Errorf("releasing block %s of node %q: %w", aff.CIDR, aff.Host, ErrTooManyRetries)
		}
		b, brev, err := a.getBlock(ctx, key)
		if errors.Is(err, datastore.ErrNotFound) || errors.Is(err, errBadValue) {
			break // no block, or one that does not decode: only the affinity goes
		}
		if err != nil {
			return fmt.Errorf("releasing block %s of node %q: %w", aff.CIDR, aff.Host, err)
		}
		if b.host() != aff.Host {
			break // someone else's block now: only our affinity goes
		}
		if b.empty() {
			err = a.kv.Delete(ctx, key, brev)
		} else if onlyEmpty {
			_, err = a.kv.Update(ctx, datastore.KVPair{Key: affKey, Value: encodeAffinity(AffinityConfirmed), Revision: rev})
			if err == nil {
				return errBlockNotEmpty
			}
			return fmt.Errorf("restoring affinity of node %q to block %s: %w", aff.Host, aff.CIDR, err)
		} else {
			b.setHost("")
			b.SequenceNumber++
			var v []byte
			if v, err = b.encode(); err == nil {
				_, err = a.kv.Update(ctx, datastore.KVPair{Key: key, Value: v, Revision: brev})
			}
		}
		if err == nil || errors.Is(err, datastore.ErrNotFound) {
			break
		}
		if !isConflict(err) {
			return fmt.Errorf("releasing block %s of node %q: %w", aff.CIDR, aff.Host, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
	if err := a.kv.Delete(ctx, affKey, rev); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("deleting affinity of node %q to block %s: %w", aff.Host, aff.CIDR, err)
	}
	logCtx.Info("Released block affinity")
	return nil
}

// errBlockNotEmpty says a block kept its affinity because it is in use.
var errBlockNotEmpty = errors.New("block is not empty")

// markPendingDeletion sets an affinity's state to pendingDeletion and
// returns its new revision.
func (a *Allocator) markPendingDeletion(ctx context.Context, key string) (int64, error) {
	for attempt := 1; attempt <= maxRetries; attempt++ {
		p, err := a.kv.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		p.Value = encodeAffinity(AffinityPendingDeletion)
		out, err := a.kv.Update(ctx, p)
		if err == nil {
			return out.Revision, nil
		}
		if !isConflict(err) {
			return 0, err
		}
		if err := backoff(ctx, attempt); err != nil {
			return 0, err
		}
	}
	return 0, ErrTooManyRetries
}

// FreeEmptyBlocks releases the affinities of host's empty blocks, deleting
// the blocks; every node's when host is "". Blocks in use are untouched. It
// returns the blocks it freed.
func (a *Allocator) FreeEmptyBlocks(ctx context.Context, host string) ([]netip.Prefix, error) {
	prefix := affinitiesPrefix
	if host != "" {
		if err := checkName("host name", host); err != nil {
			return nil, err
		}
		prefix += host + "/"
	}
	affs, err := a.listAffinities(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var freed []netip.Prefix
	var errs []error
	for _, aff := range affs {
		if aff.State != AffinityConfirmed {
			continue // a claim or release in flight
		}
		err := a.releaseAffinity(ctx, aff, true)
		switch {
		case err == nil:
			freed = append(freed, aff.CIDR)
		case !errors.Is(err, errBlockNotEmpty):
			errs = append(errs, err)
		}
	}
	return freed, errors.Join(errs...)
}

// EmptyBlocks remembers since when each block ReleaseUnusedBlocks saw was
// empty, across its calls. The zero value is ready; it is safe for
// concurrent use.
type EmptyBlocks struct {
	mu    sync.Mutex
	since map[netip.Prefix]time.Time
}

// observe records which blocks are empty at now and returns, of those,
// the ones empty since at least grace ago.
func (e *EmptyBlocks) observe(empty []netip.Prefix, now time.Time, grace time.Duration) map[netip.Prefix]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[netip.Prefix]time.Time, len(empty))
	out := map[netip.Prefix]bool{}
	for _, c := range empty {
		t, ok := e.since[c]
		if !ok {
			t = now
		}
		seen[c] = t
		if now.Sub(t) >= grace {
			out[c] = true
		}
	}
	e.since = seen
	return out
}

// ReleaseUnusedBlocks is Calico's release of unused blocks for one node:
// the affinity of each of host's blocks that holds no address, and has
// held none for at least grace as e has seen it, is released (the block
// deleted), as long as host keeps at least one other block. A block claimed
// in a race between concurrent first assignments, or left when a node's
// pods went, so goes back to the pools. Calico's IPAM garbage collection
// waits 15 minutes. It returns the blocks released.
func (a *Allocator) ReleaseUnusedBlocks(ctx context.Context, host string, e *EmptyBlocks, grace time.Duration, now time.Time) ([]netip.Prefix, error) {
	if err := checkName("host name", host); err != nil {
		return nil, err
	}
	affs, err := a.listAffinities(ctx, affinitiesPrefix+host+"/")
	if err != nil {
		return nil, err
	}
	owned := 0
	var empty []Affinity
	var emptyCIDRs []netip.Prefix
	var stalled []Affinity
	for _, aff := range affs {
		// A pending claim whose block exists is either in flight (for
		// milliseconds) or was left by a plugin killed before it
		// confirmed; the grace period tells them apart, so an empty one
		// is a candidate too, released before confirmed ones (nothing
		// allocates from a block whose claim never finished).
		if aff.State != AffinityConfirmed && aff.State != AffinityPending {
			continue // a release in flight
		}
		b, _, err := a.getBlock(ctx, blockKey(aff.CIDR))
		if err != nil || b.host() != host {
			continue
		}
		owned++
		if b.empty() {
			if aff.State == AffinityPending {
				stalled = append(stalled, aff)
			} else {
				empty = append(empty, aff)
			}
			emptyCIDRs = append(emptyCIDRs, aff.CIDR)
		}
	}
	empty = append(stalled, empty...)
	old := e.observe(emptyCIDRs, now, grace)
	var freed []netip.Prefix
	var errs []error
	for _, aff := range empty {
		if owned <= 1 {
			break
		}
		if !old[aff.CIDR] {
			continue
		}
		err := a.releaseAffinity(ctx, aff, true)
		switch {
		case err == nil:
			freed = append(freed, aff.CIDR)
			owned--
			log.WithFields(log.Fields{"node": host, "block": aff.CIDR}).Info("Released an unused block")
		case !errors.Is(err, errBlockNotEmpty):
			errs = append(errs, err)
		}
	}
	return freed, errors.Join(errs...)
}
