package ipam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxRetries bounds the compare-and-swap attempts on one key.
const maxRetries = 100

// Backoff between compare-and-swap attempts.
const (
	backoffStep = 500 * time.Microsecond
	backoffMax  = 10 * time.Millisecond
)

// Allocator assigns and releases addresses. It holds no state of its own
// beyond its connections, so any number of Allocators, in any number of
// processes, may work on the same datastore at once. It is safe for
// concurrent use.
type Allocator struct {
	kv    datastore.KV
	store datastore.Interface
	cache cache
	// bad logs and counts the stored values IPAM skips: pools it cannot
	// use, and blocks, affinities and handles that do not decode.
	bad *datastore.BadValues
}

// New returns an Allocator that keeps IPAM state in kv and reads pools,
// reservations, nodes and the IPAM configuration from store (for etcd,
// both are the same *etcdv3.Store: New(s, s.KV())). Values it skips are
// counted in the store's BadValues when it keeps one.
func New(store datastore.Interface, kv datastore.KV) *Allocator {
	return &Allocator{kv: kv, store: store, bad: datastore.BadValuesOf(store)}
}

// BadValues logs and counts the stored values the allocator skipped.
func (a *Allocator) BadValues() *datastore.BadValues { return a.bad }

// Kinds under which BadValues counts IPAM's own values.
const (
	badBlock    = "ipam/block"
	badAffinity = "ipam/affinity"
	badHandle   = "ipam/handle"
)

// errBadValue marks an IPAM value that does not decode; the error wrapping
// it names the key.
var errBadValue = errors.New("stored IPAM value does not decode")

// skip logs and counts a stored value IPAM cannot use.
func (a *Allocator) skip(key, kind string, rev int64, reason error) {
	a.bad.Skip(key, kind, rev, reason)
}

// backoff sleeps before retry attempt (1-based) of a compare-and-swap: a
// random time up to attempt×backoffStep, capped at backoffMax, so
// contenders spread out without idling the key.
func backoff(ctx context.Context, attempt int) error {
	limit := min(time.Duration(attempt)*backoffStep, backoffMax)
	d := time.Duration(rand.Int64N(int64(limit))) + 1
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isConflict reports whether err is a lost compare-and-swap.
func isConflict(err error) bool {
	return errors.Is(err, datastore.ErrConflict) || errors.Is(err, datastore.ErrAlreadyExists)
}

// parallel runs fns concurrently and returns the first error.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// listPools reads and parses every IP pool.
func (a *Allocator) listPools(ctx context.Context) ([]pool, error) {
	pools, _, err := a.listPoolsAt(ctx)
	return pools, err
}

// listPoolsAt reads and parses every IP pool, with the conditions under
// which the list is still current.
func (a *Allocator) listPoolsAt(ctx context.Context) ([]pool, []datastore.KVCond, error) {
	items, conds, err := a.listWithConds(ctx, v3.KindIPPool)
	if err != nil {
		return nil, nil, fmt.Errorf("listing IP pools: %w", err)
	}
	out := make([]pool, 0, len(items))
	for _, r := range items {
		ip, ok := r.(*v3.IPPool)
		if !ok {
			return nil, nil, fmt.Errorf("listing IP pools: got a %T", r)
		}
		p, err := parsePool(ip)
		if err != nil {
			// A pool IPAM cannot use is never allocated from, and does
			// not stop the others from being used.
			a.skipResource(v3.KindIPPool, ip, err)
			continue
		}
		out = append(out, p)
	}
	return out, conds, nil
}

// skipResource logs and counts a stored resource IPAM cannot use.
func (a *Allocator) skipResource(kind string, r v3.Resource, reason error) {
	m := r.GetObjectMeta()
	path, _ := datastore.KeyPath(datastore.Key{Kind: kind, Namespace: m.Namespace, Name: m.Name})
	rev, _ := datastore.ParseRevision(m.ResourceVersion)
	a.skip(path, kind, rev, reason)
}

// listReservationsAt reads every IPReservation's CIDRs, with the
// conditions under which they are still current.
func (a *Allocator) listReservationsAt(ctx context.Context) (reservations, []datastore.KVCond, error) {
	items, conds, err := a.listWithConds(ctx, v3.KindIPReservation)
	if err != nil {
		return nil, nil, fmt.Errorf("listing IP reservations: %w", err)
	}
	rs := make([]*v3.IPReservation, 0, len(items))
	for _, r := range items {
		ir, ok := r.(*v3.IPReservation)
		if !ok {
			return nil, nil, fmt.Errorf("listing IP reservations: got a %T", r)
		}
		rs = append(rs, ir)
	}
	res := parseReservations(rs, func(r *v3.IPReservation, err error) { a.skipResource(v3.KindIPReservation, r, err) })
	return res, conds, nil
}

// listWithConds lists every resource of kind together with conditions
// that hold exactly while the list is current: no key under the kind's
// prefix modified after the list's revision, and each listed key still
// at its revision (which catches deletions).
func (a *Allocator) listWithConds(ctx context.Context, kind string) ([]v3.Resource, []datastore.KVCond, error) {
	items, rev, err := a.store.List(ctx, datastore.ListOptions{Kind: kind})
	if err != nil {
		return nil, nil, err
	}
	prefix, _, err := datastore.ListPath(datastore.ListOptions{Kind: kind})
	if err != nil {
		return nil, nil, err
	}
	listRev, err := datastore.ParseRevision(rev)
	if err != nil {
		return nil, nil, fmt.Errorf("list revision: %w", err)
	}
	conds := []datastore.KVCond{{Key: prefix, Prefix: true, Revision: listRev}}
	for _, r := range items {
		c, err := resourceCond(kind, r)
		if err != nil {
			return nil, nil, err
		}
		conds = append(conds, c)
	}
	return items, conds, nil
}

// resourceCond is the condition that r is still stored at its revision.
func resourceCond(kind string, r v3.Resource) (datastore.KVCond, error) {
	m := r.GetObjectMeta()
	path, err := datastore.KeyPath(datastore.Key{Kind: kind, Namespace: m.Namespace, Name: m.Name})
	if err != nil {
		return datastore.KVCond{}, err
	}
	rev, err := datastore.ParseRevision(m.ResourceVersion)
	if err != nil {
		return datastore.KVCond{}, fmt.Errorf("%s: resourceVersion: %w", path, err)
	}
	return datastore.KVCond{Key: path, Revision: rev}, nil
}

// nodeLabels reads the labels of the Node resource named host, with the
// condition that they are still current; a node that does not exist has
// no labels (until it is created).
func (a *Allocator) nodeLabels(ctx context.Context, host string) (map[string]string, datastore.KVCond, error) {
	path, err := datastore.KeyPath(datastore.Key{Kind: v3.KindNode, Name: host})
	if err != nil {
		return nil, datastore.KVCond{}, err
	}
	r, err := a.store.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: host})
	if errors.Is(err, datastore.ErrNotFound) {
		log.WithField("node", host).Debug("No Node resource: pool node selectors see no labels")
		return nil, datastore.KVCond{Key: path}, nil
	}
	var bv *datastore.BadValueError
	if errors.As(err, &bv) {
		// Logged and counted by the store: a node that cannot be read
		// has no labels, until it is written again.
		return nil, datastore.KVCond{Key: path, Revision: bv.Revision}, nil
	}
	if err != nil {
		return nil, datastore.KVCond{}, fmt.Errorf("reading node %q for pool selection: %w", host, err)
	}
	c, err := resourceCond(v3.KindNode, r)
	return r.GetObjectMeta().Labels, c, err
}

// getBlock reads and decodes the block for cidr.
func (a *Allocator) getBlock(ctx context.Context, key string) (*block, int64, error) {
	p, err := a.kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	b, err := a.decodeBlockAt(key, p.Value, p.Revision)
	if err != nil {
		return nil, 0, err
	}
	return b, p.Revision, nil
}

// decodeBlockAt decodes the block stored at key; one that does not decode
// (or is stored under the key of another CIDR) is logged and counted, and
// the error wraps errBadValue: the block is of no use to anyone.
func (a *Allocator) decodeBlockAt(key string, value []byte, rev int64) (*block, error) {
	b, err := decodeBlock(value)
	if err == nil {
		if want, kerr := parseBlockKey(key); kerr == nil && want != b.prefix {
			err = fmt.Errorf("block %s stored under the key of %s", b.prefix, want)
		}
	}
	if err != nil {
		a.skip(key, badBlock, rev, err)
		return nil, fmt.Errorf("key %q: %w: %w", key, errBadValue, err)
	}
	return b, nil
}

// putBlock writes b over revision rev; a block that became empty and has
// no affinity is deleted instead, as Calico does.
func (a *Allocator) putBlock(ctx context.Context, key string, b *block, rev int64) error {
	if b.empty() && b.host() == "" {
		return a.kv.Delete(ctx, key, rev)
	}
	v, err := b.encode()
	if err != nil {
		return err
	}
	_, err = a.kv.Update(ctx, datastore.KVPair{Key: key, Value: v, Revision: rev})
	return err
}

// listBlocks reads every block of an IP version (both when version is 0).
func (a *Allocator) listBlocks(ctx context.Context, version int) ([]storedBlock, error) {
	prefix := blocksPrefix
	if version != 0 {
		prefix = blocksFamilyPrefix(version)
	}
	kvs, _, err := a.kv.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing blocks: %w", err)
	}
	out := make([]storedBlock, 0, len(kvs))
	for _, p := range kvs {
		b, err := a.decodeBlockAt(p.Key, p.Value, p.Revision)
		if err != nil {
			continue // logged and counted; no address is handed out from it
		}
		out = append(out, storedBlock{block: b, key: p.Key, rev: p.Revision})
	}
	return out, nil
}

// storedBlock is a decoded block with its key and revision.
type storedBlock struct {
	block *block
	key   string
	rev   int64
}
