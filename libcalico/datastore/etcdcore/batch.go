package etcdcore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// MaxBatch is the most writes one WriteBatch takes: etcd refuses
// transactions of more than 128 operations by default.
const MaxBatch = 128

// WriteBatch stores every write in one etcd transaction whose compares
// are the writes' preconditions; see datastore.Interface.
func (s *Store) WriteBatch(ctx context.Context, writes []datastore.BatchWrite) ([]v3.Resource, error) {
	if len(writes) > MaxBatch {
		return nil, fmt.Errorf("a batch takes at most %d writes, got %d", MaxBatch, len(writes))
	}
	cmps := make([]Compare, 0, len(writes))
	ops := make([]Op, 0, len(writes))
	objs := make([]v3.Resource, 0, len(writes))
	seen := make(map[string]bool, len(writes))
	now := v3.NewTime(time.Now())
	for _, w := range writes {
		k, path, err := s.codec.KeyOf(w.Resource)
		if err != nil {
			return nil, err
		}
		if seen[path] {
			return nil, fmt.Errorf("%s: named twice in one batch", k)
		}
		seen[path] = true
		m := w.Resource.GetObjectMeta()
		uid, created := uuid.NewString(), now
		if w.Create {
			cmps = append(cmps, Absent(path))
		} else {
			rev, err := datastore.ParseRevision(m.ResourceVersion)
			if err != nil {
				return nil, fmt.Errorf("%s: metadata.resourceVersion: %w", k, err)
			}
			if rev == 0 {
				return nil, fmt.Errorf("%s: a batched update needs metadata.resourceVersion", k)
			}
			cmps = append(cmps, ModifiedAt(path, rev))
			if m.UID != "" {
				uid = m.UID
			}
			if !m.CreationTimestamp.IsZero() {
				created = m.CreationTimestamp
			}
		}
		val, obj, err := s.codec.Encode(w.Resource, uid, created)
		if err != nil {
			return nil, err
		}
		ops = append(ops, OpPut(path, val))
		objs = append(objs, obj)
	}
	resp, err := s.tr.Txn(ctx, cmps, ops, nil)
	if err != nil {
		return nil, fmt.Errorf("writing a batch of %d resources: %w", len(writes), err)
	}
	if !resp.Succeeded {
		return nil, &datastore.BatchRejectedError{Writes: len(writes)}
	}
	for _, obj := range objs {
		setRevision(obj, resp.Revision)
	}
	return objs, nil
}
