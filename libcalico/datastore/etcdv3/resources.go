package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxWriteAttempts bounds the retries of an unconditional write that keeps
// losing races with other writers.
const maxWriteAttempts = 16

// revString formats a mod revision as a resourceVersion.
func revString(rev int64) string { return strconv.FormatInt(rev, 10) }

// setRevision stamps a returned object with the revision it was stored at.
func setRevision(r v3.Resource, rev int64) v3.Resource {
	r.GetObjectMeta().ResourceVersion = revString(rev)
	return r
}

// Create stores a new resource with a fresh uid and creationTimestamp.
func (s *Store) Create(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	k, path, err := s.codec.KeyOf(r)
	if err != nil {
		return nil, err
	}
	obj, err := s.create(ctx, k, path, r)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// create writes r at path if the key is free.
func (s *Store) create(ctx context.Context, k datastore.Key, path string, r v3.Resource) (v3.Resource, error) {
	val, obj, err := s.codec.Encode(r, uuid.NewString(), v3.NewTime(time.Now()))
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(path), "=", 0)).
		Then(clientv3.OpPut(path, string(val))).
		Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("%s: create: %w", k, err)
	}
	if !resp.Succeeded {
		e := &datastore.AlreadyExistsError{Key: k}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			e.Revision = revString(kvs[0].ModRevision)
		}
		return nil, e
	}
	return setRevision(obj, resp.Header.Revision), nil
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
		cur, err := s.client.Get(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("%s: reading before update: %w", k, err)
		}
		if len(cur.Kvs) == 0 {
			if !upsert || want != 0 {
				return nil, &datastore.NotFoundError{Key: k}
			}
			obj, err := s.create(ctx, k, path, r)
			if errors.Is(err, datastore.ErrAlreadyExists) {
				continue // created meanwhile: update it on the next pass
			}
			return obj, err
		}
		kv := cur.Kvs[0]
		if want != 0 && kv.ModRevision != want {
			return nil, &datastore.ConflictError{Key: k, Op: "update", Revision: revString(want), Current: revString(kv.ModRevision)}
		}
		old, err := s.codec.Decode(path, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		om := old.GetObjectMeta()
		uid, created := om.UID, om.CreationTimestamp
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
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(path), "=", kv.ModRevision)).
			Then(clientv3.OpPut(path, string(val))).
			Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("%s: update: %w", k, err)
		}
		if resp.Succeeded {
			return setRevision(obj, resp.Header.Revision), nil
		}
		if want != 0 {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return nil, &datastore.NotFoundError{Key: k}
			}
			return nil, &datastore.ConflictError{Key: k, Op: "update", Revision: revString(want), Current: revString(kvs[0].ModRevision)}
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
	var prev []byte
	var prevRev int64
	if want == 0 {
		resp, err := s.client.Delete(ctx, path, clientv3.WithPrevKV())
		if err != nil {
			return nil, fmt.Errorf("%s: delete: %w", k, err)
		}
		if resp.Deleted == 0 || len(resp.PrevKvs) == 0 {
			return nil, &datastore.NotFoundError{Key: k}
		}
		prev, prevRev = resp.PrevKvs[0].Value, resp.PrevKvs[0].ModRevision
	} else {
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(path), "=", want)).
			Then(clientv3.OpDelete(path, clientv3.WithPrevKV())).
			Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("%s: delete: %w", k, err)
		}
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return nil, &datastore.NotFoundError{Key: k}
			}
			return nil, &datastore.ConflictError{Key: k, Op: "delete", Revision: revString(want), Current: revString(kvs[0].ModRevision)}
		}
		kvs := resp.Responses[0].GetResponseDeleteRange().PrevKvs
		if len(kvs) == 0 {
			return nil, &datastore.NotFoundError{Key: k}
		}
		prev, prevRev = kvs[0].Value, kvs[0].ModRevision
	}
	return s.codec.Decode(path, prev, prevRev)
}

// Get reads one resource.
func (s *Store) Get(ctx context.Context, k datastore.Key) (v3.Resource, error) {
	path, err := datastore.KeyPath(k)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Get(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s: get: %w", k, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, &datastore.NotFoundError{Key: k}
	}
	return s.codec.Decode(path, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}
