// Package mirror keeps the Calico resources of one kind that a controller
// owns equal to what its Kubernetes source says they should be. A full
// sync lists the owned resources in etcd and makes each one match (create,
// update or delete), in transactions of many writes; between full syncs,
// keys enqueued by informer events are reconciled against what the mirror
// last wrote or read. Everything written is defaulted and validated first.
package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/palisade-net/palisade/kube-controllers/queue"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Source says what the mirror's resources should be.
type Source interface {
	// Owns says whether a stored resource of the kind is the mirror's.
	Owns(k datastore.Key) bool
	// Desired is what k should hold; nil when it should not exist.
	Desired(k datastore.Key) (v3.Resource, error)
	// Keys lists every key that should exist.
	Keys() []datastore.Key
}

// maxBatch is the most writes sent in one transaction (etcd takes 128).
const maxBatch = 100

// fullSyncChunk is how many keys a full sync reconciles at a time.
const fullSyncChunk = 1000

// Mirror reconciles one kind. Create it with New, feed it keys with
// Enqueue, and Run it.
type Mirror struct {
	name  string
	kind  string
	src   Source
	store datastore.Interface
	log   *log.Entry
	queue *queue.Queue[datastore.Key]

	// proc serialises full syncs and batches: a batch never acts on a
	// view a concurrent full sync is replacing.
	proc   sync.Mutex
	actual map[datastore.Key]stored

	synced atomic.Bool
	// writes counts the creates, updates and deletes made.
	writes atomic.Int64
}

// stored is what the mirror knows of a stored resource.
type stored struct {
	rev     string
	uid     string
	created v3.Time
	hash    [32]byte
}

// New makes a mirror of kind over store. name labels its logs and its
// queue's metrics; queues provides those metrics (nil for none).
func New(name, kind string, src Source, store datastore.Interface, queues workqueue.MetricsProvider) *Mirror {
	return &Mirror{name: name, kind: kind, src: src, store: store, actual: map[datastore.Key]stored{},
		log:   log.WithField("controller", name),
		queue: queue.New[datastore.Key](name, 50*time.Millisecond, queues)}
}

// Enqueue asks for k to be reconciled.
func (m *Mirror) Enqueue(k datastore.Key) { m.queue.Add(k) }

// Synced says whether the first full sync has completed.
func (m *Mirror) Synced() bool { return m.synced.Load() }

// Err is the last reconcile error, nil after a success.
func (m *Mirror) Err() error { return m.queue.Err() }

// Writes is how many writes the mirror has made.
func (m *Mirror) Writes() int64 { return m.writes.Load() }

// Run does a full sync (retried with backoff until it succeeds), then
// reconciles enqueued keys, and does another full sync every period,
// until ctx ends. Call it once the source's informers have synced.
func (m *Mirror) Run(ctx context.Context, period time.Duration) {
	m.queue.ShutDownOn(ctx)
	m.fullSyncRetrying(ctx)
	go queue.Every(ctx, period, func() { m.fullSyncRetrying(ctx) })
	reconcile := func(batch []datastore.Key) error {
		m.proc.Lock()
		defer m.proc.Unlock()
		return m.reconcile(ctx, batch)
	}
	// A burst of events becomes a few transactions, while a lone event
	// goes out at once.
	for m.queue.ProcessBatch(maxBatch, reconcile, func(batch []datastore.Key, err error) bool {
		m.log.WithError(err).WithField("keys", len(batch)).Warn("Reconcile failed; retrying with backoff")
		return true
	}) {
	}
}

// fullSyncRetrying runs FullSync until it succeeds or ctx ends.
func (m *Mirror) fullSyncRetrying(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		err := m.FullSync(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		m.queue.SetErr(err)
		d := min(30*time.Second, 100*time.Millisecond<<min(attempt, 9))
		m.log.WithError(err).WithField("retryIn", d).Warn("Full sync failed; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// FullSync lists the owned resources, then makes every one of them and
// every key the source wants match the source.
func (m *Mirror) FullSync(ctx context.Context) error {
	m.proc.Lock()
	defer m.proc.Unlock()
	began := time.Now()
	items, _, err := m.store.List(ctx, datastore.ListOptions{Kind: m.kind})
	if err != nil {
		return fmt.Errorf("%s: listing %s: %w", m.name, m.kind, err)
	}
	actual := make(map[datastore.Key]stored, len(items))
	for _, r := range items {
		k := datastore.KeyOf(r)
		if m.src.Owns(k) {
			actual[k] = storedOf(r)
		}
	}
	m.actual = actual
	keys := m.src.Keys()
	seen := make(map[datastore.Key]bool, len(keys)+len(actual))
	all := make([]datastore.Key, 0, len(keys)+len(actual))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			all = append(all, k)
		}
	}
	for k := range actual {
		if !seen[k] {
			seen[k] = true
			all = append(all, k)
		}
	}
	before := m.writes.Load()
	// In chunks, so that what is built to be written stays small however
	// many resources there are.
	for len(all) > 0 {
		n := min(len(all), fullSyncChunk)
		if err := m.reconcile(ctx, all[:n]); err != nil {
			return err
		}
		all = all[n:]
	}
	m.queue.SetErr(nil)
	first := !m.synced.Swap(true)
	m.log.WithFields(log.Fields{"stored": len(items), "owned": len(actual), "wanted": len(keys),
		"writes": m.writes.Load() - before, "took": time.Since(began).Round(time.Millisecond), "first": first}).Info("Full sync done")
	return nil
}

// reconcile makes keys match the source; m.proc is held.
func (m *Mirror) reconcile(ctx context.Context, keys []datastore.Key) error {
	var writes []datastore.BatchWrite
	var deletes []datastore.Key
	var errs []error
	for _, k := range keys {
		want, err := m.src.Desired(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		have, exists := m.actual[k]
		switch {
		case want == nil && exists:
			deletes = append(deletes, k)
		case want == nil:
		default:
			v3.Default(want)
			if err := v3.Validate(want); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
				continue
			}
			h := contentHash(want)
			if exists && h == have.hash {
				continue
			}
			w := datastore.BatchWrite{Resource: want, Create: !exists}
			if exists {
				meta := want.GetObjectMeta()
				meta.ResourceVersion, meta.UID, meta.CreationTimestamp = have.rev, have.uid, have.created
			}
			writes = append(writes, w)
		}
	}
	for len(writes) > 0 {
		n := min(len(writes), maxBatch)
		if err := m.writeBatch(ctx, writes[:n]); err != nil {
			errs = append(errs, err)
		}
		writes = writes[n:]
	}
	for _, k := range deletes {
		if err := m.delete(ctx, k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeBatch writes in one transaction; when a precondition fails (the
// mirror's view was stale), each write is redone against what is stored.
func (m *Mirror) writeBatch(ctx context.Context, writes []datastore.BatchWrite) error {
	out, err := m.store.WriteBatch(ctx, writes)
	if err == nil {
		for _, r := range out {
			m.actual[datastore.KeyOf(r)] = storedOf(r)
		}
		m.writes.Add(int64(len(out)))
		if len(out) == 1 {
			m.log.WithField("key", datastore.KeyOf(out[0])).Debug("Wrote")
		}
		return nil
	}
	if !errors.Is(err, datastore.ErrBatchRejected) {
		return fmt.Errorf("%s: writing %d resources: %w", m.name, len(writes), err)
	}
	var errs []error
	for _, w := range writes {
		if err := m.writeOne(ctx, w.Resource); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeOne reads what k holds and writes r over it (or creates it).
func (m *Mirror) writeOne(ctx context.Context, r v3.Resource) error {
	k := datastore.KeyOf(r)
	cur, err := m.store.Get(ctx, k)
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		meta := r.GetObjectMeta()
		meta.ResourceVersion, meta.UID, meta.CreationTimestamp = "", "", v3.Time{}
		out, err := m.store.Create(ctx, r)
		if err != nil {
			delete(m.actual, k)
			return fmt.Errorf("%s: creating %s: %w", m.name, k, err)
		}
		m.actual[k] = storedOf(out)
	case err != nil:
		return fmt.Errorf("%s: reading %s: %w", m.name, k, err)
	default:
		v3.Default(cur)
		have := storedOf(cur)
		if have.hash == contentHash(r) {
			m.actual[k] = have
			return nil
		}
		meta := r.GetObjectMeta()
		meta.ResourceVersion, meta.UID, meta.CreationTimestamp = have.rev, have.uid, have.created
		out, err := m.store.Update(ctx, r)
		if err != nil {
			delete(m.actual, k)
			return fmt.Errorf("%s: updating %s: %w", m.name, k, err)
		}
		m.actual[k] = storedOf(out)
	}
	m.writes.Add(1)
	return nil
}

// delete removes k at the revision the mirror last saw; when that
// revision is stale (a conflict), k is deleted whatever it holds now.
func (m *Mirror) delete(ctx context.Context, k datastore.Key) error {
	rev := m.actual[k].rev
	_, err := m.store.Delete(ctx, k, rev)
	if errors.Is(err, datastore.ErrConflict) {
		_, err = m.store.Delete(ctx, k, "")
	}
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("%s: deleting %s: %w", m.name, k, err)
	}
	delete(m.actual, k)
	if err == nil {
		m.writes.Add(1)
		m.log.WithField("key", k).Debug("Deleted")
	}
	return nil
}

// storedOf records a stored resource (defaulted, so that it hashes as
// the desired one would).
func storedOf(r v3.Resource) stored {
	v3.Default(r)
	m := r.GetObjectMeta()
	return stored{rev: m.ResourceVersion, uid: m.UID, created: m.CreationTimestamp, hash: contentHash(r)}
}

// contentHash hashes what the mirror compares: labels, annotations and
// everything outside the metadata.
func contentHash(r v3.Resource) [32]byte {
	m := r.GetObjectMeta()
	saved := *m
	*m = v3.ObjectMeta{Labels: saved.Labels, Annotations: saved.Annotations}
	b, err := json.Marshal(r)
	*m = saved
	if err != nil {
		// Never equal to anything: the write goes out and fails visibly.
		return [32]byte{0xff}
	}
	return sha256.Sum256(b)
}
