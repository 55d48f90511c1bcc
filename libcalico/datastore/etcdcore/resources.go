package etcdcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxWriteAttempts bounds the retries of an unconditional write that keeps
// losing races with other writers.
const maxWriteAttempts = 16

// Create stores a new resource with a fresh uid and creationTimestamp.
func (s *Store) Create(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	k, path, err := s.codec.KeyOf(r)
	if err != nil {
		return nil, err
	}
	return s.create(ctx, k, path, r)
}

// create writes r at path if the key is free.
func (s *Store) create(ctx context.Context, k datastore.Key, path string, r v3.Resource) (v3.Resource, error) {
	val, obj, err := s.codec.Encode(r, uuid.NewString(), v3.NewTime(time.Now()))
	if err != nil {
		return nil, err
	}
	resp, err := s.tr.Txn(ctx, []Compare{Absent(path)}, []Op{OpPut(path, val)}, []Op{OpGetKeys(path)})
	if err != nil {
		return nil, fmt.Errorf("%s: create: %w", k, err)
	}
	if !resp.Succeeded {
		e := &datastore.AlreadyExistsError{Key: k}
		if kv, ok := firstKV(resp); ok {
			e.Revision = revString(kv.ModRevision)
		}
		return nil, e
	}
	return setRevision(obj, resp.Revision), nil
}

// Update replaces an existing resource; see datastore.Interface.
func (s *Store) Update(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	return s.replace(ctx, r, false)
}

// Apply creates or replaces a resource; see datastore.Interface.
func (s *Store) Apply(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	return s.replace(ctx, r, true)
}

// replace writes r over the stored resource, keeping its uid and creation
// time, as a compare-and-swap on the mod revision. With upsert, a missing
// resource is created.
func (s *Store) replace(ctx context.Context, r v3.Resource, upsert bool) (v3.Resource, error) {
	k, path, err := s.codec.KeyOf(r)
	if err != nil {
		return nil, err
	}
	want, err := datastore.ParseRevision(r.GetObjectMeta().ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("%s: metadata.resourceVersion: %w", k, err)
	}
	for attempt := 0; attempt < maxWriteAttempts; attempt++ {
		cur, err := s.tr.Range(ctx, path, false)
		if err != nil {
			return nil, fmt.Errorf("%s: reading before update: %w", k, err)
		}
		if len(cur.KVs) == 0 {
			if !upsert || want != 0 {
				return nil, &datastore.NotFoundError{Key: k}
			}
			obj, err := s.create(ctx, k, path, r)
			if errors.Is(err, datastore.ErrAlreadyExists) {
				continue // created meanwhile: update it on the next pass
			}
			return obj, err
		}
		kv := cur.KVs[0]
		if want != 0 && kv.ModRevision != want {
			return nil, &datastore.ConflictError{Key: k, Op: "update", Revision: revString(want), Current: revString(kv.ModRevision)}
		}
		// A stored value that is not a valid resource is replaced like
		// any other, with a fresh uid and creation time.
		var uid string
		var created v3.Time
		old, err := s.codec.Decode(path, kv.Value, kv.ModRevision)
		switch {
		case err == nil:
			om := old.GetObjectMeta()
			uid, created = om.UID, om.CreationTimestamp
		case errors.Is(err, datastore.ErrBadValue):
			s.bad.Record(err)
		default:
			return nil, err
		}
		if uid == "" {
			uid = uuid.NewString()
		}
		if created.IsZero() {
			created = v3.NewTime(time.Now())
		}
		val, obj, err := s.codec.Encode(r, uid, created)
		if err != nil {
			return nil, err
		}
		resp, err := s.tr.Txn(ctx, []Compare{ModifiedAt(path, kv.ModRevision)}, []Op{OpPut(path, val)}, []Op{OpGetKeys(path)})
		if err != nil {
			return nil, fmt.Errorf("%s: update: %w", k, err)
		}
		if resp.Succeeded {
			return setRevision(obj, resp.Revision), nil
		}
		if want != 0 {
			cur, ok := firstKV(resp)
			if !ok {
				return nil, &datastore.NotFoundError{Key: k}
			}
			return nil, &datastore.ConflictError{Key: k, Op: "update", Revision: revString(want), Current: revString(cur.ModRevision)}
		}
		// An unconditional write lost a race: read again and retry.
	}
	return nil, fmt.Errorf("%s: update: gave up after %d attempts racing other writers", k, maxWriteAttempts)
}

// Delete removes a resource and returns its last stored state.
func (s *Store) Delete(ctx context.Context, k datastore.Key, resourceVersion string) (v3.Resource, error) {
	path, err := datastore.KeyPath(k)
	if err != nil {
		return nil, err
	}
	want, err := datastore.ParseRevision(resourceVersion)
	if err != nil {
		return nil, fmt.Errorf("%s: resourceVersion: %w", k, err)
	}
	var cmps []Compare
	var els []Op
	if want != 0 {
		cmps, els = []Compare{ModifiedAt(path, want)}, []Op{OpGetKeys(path)}
	}
	resp, err := s.tr.Txn(ctx, cmps, []Op{OpDelete(path, true)}, els)
	if err != nil {
		return nil, fmt.Errorf("%s: delete: %w", k, err)
	}
	if !resp.Succeeded {
		cur, ok := firstKV(resp)
		if !ok {
			return nil, &datastore.NotFoundError{Key: k}
		}
		return nil, &datastore.ConflictError{Key: k, Op: "delete", Revision: revString(want), Current: revString(cur.ModRevision)}
	}
	prev, ok := firstKV(resp)
	if !ok {
		return nil, &datastore.NotFoundError{Key: k}
	}
	r, err := s.codec.Decode(path, prev.Value, prev.ModRevision)
	var bv *datastore.BadValueError
	if errors.As(err, &bv) {
		s.bad.Record(bv)
		bv.Deleted = true
	}
	return r, err
}

// Get reads one resource.
func (s *Store) Get(ctx context.Context, k datastore.Key) (v3.Resource, error) {
	path, err := datastore.KeyPath(k)
	if err != nil {
		return nil, err
	}
	resp, err := s.tr.Range(ctx, path, false)
	if err != nil {
		return nil, fmt.Errorf("%s: get: %w", k, err)
	}
	if len(resp.KVs) == 0 {
		return nil, &datastore.NotFoundError{Key: k}
	}
	r, err := s.codec.Decode(path, resp.KVs[0].Value, resp.KVs[0].ModRevision)
	if errors.Is(err, datastore.ErrBadValue) {
		s.bad.Record(err)
	}
	return r, err
}
