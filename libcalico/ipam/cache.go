package ipam

import (
	"cmp"
	"context"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxCachedBlocks bounds the blocks an Allocator remembers.
const maxCachedBlocks = 4096

// snapshot is what an auto-assignment decides with besides blocks and
// affinities: pools, reservations and the IPAM configuration, with the
// conditions under which it is still current. Every block write made
// with it carries those conditions, so a write based on an outdated
// snapshot fails as a conflict and nothing is ever decided on stale
// settings.
type snapshot struct {
	pools    []pool
	reserved reservations
	cfg      Config
	conds    []datastore.KVCond
}

// cache is what an Allocator last read or wrote, so that the next
// auto-assignment can go straight to a block's compare-and-swap: the
// snapshot, each node's affinities, and the last known value and
// revision of blocks. Nothing in it is trusted: every write it leads to
// is a compare-and-swap on the blocks', affinities' and snapshot's
// revisions, and a lost one reads the truth back.
type cache struct {
	mu     sync.Mutex
	snap   *snapshot
	affs   map[string][]Affinity // by hostFamily
	blocks map[netip.Prefix]storedBlock
	// seed orders a node's blocks with room for this Allocator.
	seed uint64
	// preferred is, per node, the block this Allocator last assigned
	// from: its cached value is the likeliest to be current.
	preferred map[string]netip.Prefix
	// fresh is, per node, what Prefetch read for its next AutoAssign.
	fresh map[string]prefetched
}

// hostFamily keys a node's affinities of one IP version.
func hostFamily(host string, version int) string { return host + "/" + strconv.Itoa(version) }

func (c *cache) snapshot() *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

func (c *cache) setSnapshot(s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap = s
}

// affinities returns a node's cached affinities of one version.
func (c *cache) affinities(host string, version int) ([]Affinity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	affs, ok := c.affs[hostFamily(host, version)]
	return affs, ok
}

func (c *cache) setAffinities(host string, version int, affs []Affinity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.affs == nil || len(c.affs) > maxCachedBlocks {
		c.affs = map[string][]Affinity{}
	}
	c.affs[hostFamily(host, version)] = affs
}

// forget drops everything but block values: the next auto-assignment
// reads the snapshot and the affinities again.
func (c *cache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap, c.affs, c.fresh = nil, nil, nil
}

// setPrefetched records what Prefetch read for host.
func (c *cache) setPrefetched(host string, p prefetched) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh == nil || len(c.fresh) > maxCachedBlocks {
		c.fresh = map[string]prefetched{}
	}
	c.fresh[host] = p
}

// takePrefetched returns, and forgets, what Prefetch read for host.
func (c *cache) takePrefetched(host string) (prefetched, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.fresh[host]
	delete(c.fresh, host)
	return p, ok
}

// block returns a copy of the last known value of a block.
func (c *cache) block(cidr netip.Prefix) (storedBlock, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sb, ok := c.blocks[cidr]
	if ok {
		sb.block = sb.block.clone()
	}
	return sb, ok
}

// free returns how many free addresses a block had when last seen.
func (c *cache) free(cidr netip.Prefix) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sb, ok := c.blocks[cidr]
	if !ok {
		return 0, false
	}
	return len(sb.block.Unallocated), true
}

// setBlock remembers a block's value, which the caller must not change
// afterwards; a nil block (it is gone) forgets it.
func (c *cache) setBlock(cidr netip.Prefix, b *block, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b == nil {
		delete(c.blocks, cidr)
		return
	}
	if c.blocks == nil || len(c.blocks) >= maxCachedBlocks {
		c.blocks = map[netip.Prefix]storedBlock{}
	}
	c.blocks[cidr] = storedBlock{block: b, key: blockKey(cidr), rev: rev}
}

// prefer records the block last assigned from for host.
func (c *cache) prefer(host string, cidr netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.preferred == nil || len(c.preferred) > maxCachedBlocks {
		c.preferred = map[string]netip.Prefix{}
	}
	c.preferred[host] = cidr
}

// spreadOrder orders host's blocks for this Allocator: the one it last
// assigned from first, then those last seen with room (or not seen) in an
// order of this Allocator's own, so concurrent Allocators for one node
// start at different blocks; full ones last.
func (c *cache) spreadOrder(host string, affs []Affinity) []Affinity {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seed == 0 {
		c.seed = rand.Uint64() | 1
	}
	pref, hasPref := c.preferred[host]
	rank := func(aff Affinity) uint64 {
		if sb, ok := c.blocks[aff.CIDR]; ok && len(sb.block.Unallocated) == 0 {
			return ^uint64(0) // full: last
		}
		if hasPref && aff.CIDR == pref {
			return 0
		}
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], c.seed)
		h.Write(b[:])
		h.Write([]byte(aff.CIDR.String()))
		return h.Sum64()>>1 + 1
	}
	out := slices.Clone(affs)
	ranks := make(map[netip.Prefix]uint64, len(out))
	for _, aff := range out {
		ranks[aff.CIDR] = rank(aff)
	}
	slices.SortStableFunc(out, func(x, y Affinity) int { return cmp.Compare(ranks[x.CIDR], ranks[y.CIDR]) })
	return out
}

// readSnapshot reads pools, reservations and the configuration afresh.
func (a *Allocator) readSnapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{}
	var poolConds, resConds []datastore.KVCond
	var cfgConds []datastore.KVCond
	err := parallel(
		func() (err error) { s.pools, poolConds, err = a.listPoolsAt(ctx); return },
		func() (err error) { s.reserved, resConds, err = a.listReservationsAt(ctx); return },
		func() (err error) { s.cfg, cfgConds, err = a.getConfigAt(ctx); return },
	)
	if err != nil {
		return nil, err
	}
	s.conds = append(append(append(s.conds, poolConds...), resConds...), cfgConds...)
	return s, nil
}
