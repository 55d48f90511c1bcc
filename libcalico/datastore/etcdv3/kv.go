package etcdv3

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// KV is the raw key-value view of a Store, for IPAM.
type KV struct {
	client *clientv3.Client
}

var _ datastore.KV = (*KV)(nil)

// KV returns the raw key-value view of the store's connection.
func (s *Store) KV() *KV { return &KV{client: s.client} }

// Get reads one key.
func (kv *KV) Get(ctx context.Context, key string) (datastore.KVPair, error) {
	resp, err := kv.client.Get(ctx, key)
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: get: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return datastore.KVPair{}, &datastore.NotFoundError{Path: key}
	}
	return datastore.KVPair{Key: key, Value: resp.Kvs[0].Value, Revision: resp.Kvs[0].ModRevision}, nil
}

// List reads every key under prefix, sorted by key.
func (kv *KV) List(ctx context.Context, prefix string) ([]datastore.KVPair, int64, error) {
	if prefix == "" {
		return nil, 0, fmt.Errorf("listing raw keys needs a prefix")
	}
	resp, err := kv.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("listing %s: %w", prefix, err)
	}
	out := make([]datastore.KVPair, len(resp.Kvs))
	for i, p := range resp.Kvs {
		out[i] = datastore.KVPair{Key: string(p.Key), Value: p.Value, Revision: p.ModRevision}
	}
	return out, resp.Header.Revision, nil
}

// Create stores a new key.
func (kv *KV) Create(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	resp, err := kv.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(p.Key), "=", 0)).
		Then(clientv3.OpPut(p.Key, string(p.Value))).
		Else(clientv3.OpGet(p.Key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: create: %w", p.Key, err)
	}
	if !resp.Succeeded {
		e := &datastore.AlreadyExistsError{Path: p.Key}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			e.Revision = revString(kvs[0].ModRevision)
		}
		return datastore.KVPair{}, e
	}
	return datastore.KVPair{Key: p.Key, Value: p.Value, Revision: resp.Header.Revision}, nil
}

// Update replaces an existing key, as a compare-and-swap on p.Revision
// when it is set.
func (kv *KV) Update(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	cmp := clientv3.Compare(clientv3.ModRevision(p.Key), "=", p.Revision)
	if p.Revision == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(p.Key), ">", 0)
	}
	resp, err := kv.client.Txn(ctx).
		If(cmp).
		Then(clientv3.OpPut(p.Key, string(p.Value))).
		Else(clientv3.OpGet(p.Key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return datastore.KVPair{}, fmt.Errorf("key %q: update: %w", p.Key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return datastore.KVPair{}, &datastore.NotFoundError{Path: p.Key}
		}
		return datastore.KVPair{}, &datastore.ConflictError{Path: p.Key, Op: "update", Revision: revString(p.Revision), Current: revString(kvs[0].ModRevision)}
	}
	return datastore.KVPair{Key: p.Key, Value: p.Value, Revision: resp.Header.Revision}, nil
}

// Delete removes a key, as a compare-and-swap on revision when it is set.
func (kv *KV) Delete(ctx context.Context, key string, revision int64) error {
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", revision)
	if revision == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	resp, err := kv.client.Txn(ctx).
		If(cmp).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("key %q: delete: %w", key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return &datastore.NotFoundError{Path: key}
		}
		return &datastore.ConflictError{Path: key, Op: "delete", Revision: revString(revision), Current: revString(kvs[0].ModRevision)}
	}
	return nil
}

// Txn applies ops if every cond holds, as one etcd transaction; on a
// failed cond its else branch reads the single-key conds' keys back.
func (kv *KV) Txn(ctx context.Context, conds []datastore.KVCond, ops []datastore.KVOp) (int64, []datastore.KVPair, error) {
	if len(ops) == 0 {
		return 0, nil, fmt.Errorf("transaction with no writes")
	}
	cmps := make([]clientv3.Cmp, 0, len(conds))
	var reads []clientv3.Op
	var readKeys []string
	for _, c := range conds {
		if c.Prefix {
			if c.Key == "" {
				return 0, nil, fmt.Errorf("transaction condition on an empty prefix")
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.Key), "<", c.Revision+1).WithPrefix())
			continue
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Revision))
		reads = append(reads, clientv3.OpGet(c.Key))
		readKeys = append(readKeys, c.Key)
	}
	writes := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		if o.Delete {
			writes[i] = clientv3.OpDelete(o.Key)
		} else {
			writes[i] = clientv3.OpPut(o.Key, string(o.Value))
		}
	}
	resp, err := kv.client.Txn(ctx).If(cmps...).Then(writes...).Else(reads...).Commit()
	if err != nil {
		return 0, nil, fmt.Errorf("transaction on %q: %w", ops[0].Key, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil, nil
	}
	current := make([]datastore.KVPair, len(readKeys))
	conflict := &datastore.ConflictError{Op: "transaction"}
	for i, key := range readKeys {
		current[i].Key = key
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			current[i].Value, current[i].Revision = kvs[0].Value, kvs[0].ModRevision
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
