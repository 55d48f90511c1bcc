package etcdcore

import (
	"context"
	"fmt"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// KV is the raw key-value view of a Store, for IPAM.
type KV struct {
	tr Transport
}

var _ datastore.KV = (*KV)(nil)

// KV returns the raw key-value view of the store's connection.
func (s *Store) KV() *KV { return &KV{tr: s.tr} }

// Get reads one key.
func (kv *KV) Get(ctx context.Context, key string) (datastore.KVPair, error) {
	resp, err := kv.tr.Range(ctx, key, false)
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: get: %w", key, err)
	}
	if len(resp.KVs) == 0 {
		return datastore.KVPair{}, &datastore.NotFoundError{Path: key}
	}
	return datastore.KVPair{Key: key, Value: resp.KVs[0].Value, Revision: resp.KVs[0].ModRevision}, nil
}

// List reads every key under prefix, sorted by key.
func (kv *KV) List(ctx context.Context, prefix string) ([]datastore.KVPair, int64, error) {
	if prefix == "" {
		return nil, 0, fmt.Errorf("listing raw keys needs a prefix")
	}
	resp, err := kv.tr.Range(ctx, prefix, true)
	if err != nil {
		return nil, 0, fmt.Errorf("listing %s: %w", prefix, err)
	}
	out := make([]datastore.KVPair, len(resp.KVs))
	for i, p := range resp.KVs {
		out[i] = datastore.KVPair{Key: p.Key, Value: p.Value, Revision: p.ModRevision}
	}
	return out, resp.Revision, nil
}

// Create stores a new key.
func (kv *KV) Create(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	resp, err := kv.tr.Txn(ctx, []Compare{Absent(p.Key)}, []Op{OpPut(p.Key, p.Value)}, []Op{OpGetKeys(p.Key)})
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: create: %w", p.Key, err)
	}
	if !resp.Succeeded {
		e := &datastore.AlreadyExistsError{Path: p.Key}
		if cur, ok := firstKV(resp); ok {
			e.Revision = revString(cur.ModRevision)
		}
		return datastore.KVPair{}, e
	}
	return datastore.KVPair{Key: p.Key, Value: p.Value, Revision: resp.Revision}, nil
}

// Update replaces an existing key, as a compare-and-swap on p.Revision
// when it is set.
func (kv *KV) Update(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	resp, err := kv.tr.Txn(ctx, []Compare{heldAt(p.Key, p.Revision)}, []Op{OpPut(p.Key, p.Value)}, []Op{OpGetKeys(p.Key)})
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: update: %w", p.Key, err)
	}
	if !resp.Succeeded {
		cur, ok := firstKV(resp)
		if !ok {
			return datastore.KVPair{}, &datastore.NotFoundError{Path: p.Key}
		}
		return datastore.KVPair{}, &datastore.ConflictError{Path: p.Key, Op: "update", Revision: revString(p.Revision), Current: revString(cur.ModRevision)}
	}
	return datastore.KVPair{Key: p.Key, Value: p.Value, Revision: resp.Revision}, nil
}

// Delete removes a key, as a compare-and-swap on revision when it is set.
func (kv *KV) Delete(ctx context.Context, key string, revision int64) error {
	resp, err := kv.tr.Txn(ctx, []Compare{heldAt(key, revision)}, []Op{OpDelete(key, false)}, []Op{OpGetKeys(key)})
	if err != nil {
		return fmt.Errorf("key %q: delete: %w", key, err)
	}
	if !resp.Succeeded {
		cur, ok := firstKV(resp)
		if !ok {
			return &datastore.NotFoundError{Path: key}
		}
		return &datastore.ConflictError{Path: key, Op: "delete", Revision: revString(revision), Current: revString(cur.ModRevision)}
	}
	return nil
}

// heldAt holds when key was last written at revision, or, for revision 0,
// when it exists at all.
func heldAt(key string, revision int64) Compare {
	if revision == 0 {
		return Exists(key)
	}
	return ModifiedAt(key, revision)
}

// Txn applies ops if every cond holds, as one etcd transaction; on a
// failed cond its else branch reads the single-key conds' keys back.
func (kv *KV) Txn(ctx context.Context, conds []datastore.KVCond, ops []datastore.KVOp) (int64, []datastore.KVPair, error) {
	if len(ops) == 0 {
		return 0, nil, fmt.Errorf("transaction with no writes")
	}
	cmps := make([]Compare, 0, len(conds))
	var reads []Op
	var readKeys []string
	for _, c := range conds {
		if c.Prefix {
			if c.Key == "" {
				return 0, nil, fmt.Errorf("transaction condition on an empty prefix")
			}
			cmps = append(cmps, Compare{Key: c.Key, Prefix: true, Target: ModRevision, Result: Less, Revision: c.Revision + 1})
			continue
		}
		cmps = append(cmps, ModifiedAt(c.Key, c.Revision))
		reads = append(reads, OpGet(c.Key))
		readKeys = append(readKeys, c.Key)
	}
	writes := make([]Op, len(ops))
	for i, o := range ops {
		if o.Delete {
			writes[i] = OpDelete(o.Key, false)
		} else {
			writes[i] = OpPut(o.Key, o.Value)
		}
	}
	resp, err := kv.tr.Txn(ctx, cmps, writes, reads)
	if err != nil {
		return 0, nil, fmt.Errorf("transaction on %q: %w", ops[0].Key, err)
	}
	if resp.Succeeded {
		return resp.Revision, nil, nil
	}
	current := make([]datastore.KVPair, len(readKeys))
	conflict := &datastore.ConflictError{Op: "transaction"}
	for i, key := range readKeys {
		current[i].Key = key
		if i < len(resp.Results) && len(resp.Results[i].KVs) > 0 {
			kv := resp.Results[i].KVs[0]
			current[i].Value, current[i].Revision = kv.Value, kv.ModRevision
		}
	}
	j := 0
	for _, c := range conds {
		if c.Prefix {
			continue
		}
		if current[j].Revision != c.Revision && conflict.Path == "" {
			conflict.Path, conflict.Revision, conflict.Current = c.Key, revString(c.Revision), revString(current[j].Revision)
		}
		j++
	}
	if conflict.Path == "" {
		// Only a prefix condition failed.
		for _, c := range conds {
			if c.Prefix {
				conflict.Path, conflict.Revision, conflict.Current = c.Key, revString(c.Revision), "newer"
				break
			}
		}
	}
	return 0, current, conflict
}
