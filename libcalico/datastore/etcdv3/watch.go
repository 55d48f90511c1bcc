package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// watchBuffer is how many events a watcher holds for a slow consumer
// before it stops reading from etcd.
const watchBuffer = 64

// retryDelay is the pause before watching or listing again after an error.
const retryDelay = 200 * time.Millisecond

// logLevelFor is the level of a watcher's retry message: debug when etcd
// is unreachable or has no leader (the agent logs that once), warning for
// anything else.
func logLevelFor(err error) log.Level {
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return log.DebugLevel
	}
	return log.WarnLevel
}

// delivered is what the watcher knows of what the consumer holds for one
// key: the revision of the value last delivered, and whether that value
// was a valid resource. Not the value itself: a deletion's last value
// comes with its event (etcd's previous key-value), and only a deletion
// found by listing again after a compaction, whose history is gone, is
// reported without it (see lastKnown).
type delivered struct {
	modRev int64
	// bad: the value is not a valid resource, so the consumer does not
	// have it (List skips such values, and so does the watcher).
	bad bool
	// unchecked: seeded from the keys alone (Watch), so whether the value
	// was valid is learnt from etcd's previous key-value when the key
	// next changes. (Found gone after a compaction, such a key is
	// reported deleted even if its value was not valid: a deletion of a
	// key the consumer does not hold.)
	unchecked bool
}

// watcher follows one key or prefix. It remembers the revision it
// delivered for every key (seeded with the state at the start revision),
// so that after a compaction it can list again and report just the
// difference.
type watcher struct {
	store  *Store
	path   string
	prefix bool
	ctx    context.Context
	cancel context.CancelFunc
	events chan datastore.Event
	done   chan struct{}
	log    *log.Entry

	known map[string]delivered
	// rev is the last revision whose changes have been delivered.
	rev int64
}

// Watch follows what opts selects from revision (exclusive), or from now.
// It reads the keys (not the values) at that revision once, to learn
// what the consumer holds; WatchListed spares that read.
func (s *Store) Watch(ctx context.Context, opts datastore.ListOptions, revision string) (datastore.Watcher, error) {
	path, prefix, err := datastore.ListPath(opts)
	if err != nil {
		return nil, err
	}
	start, err := datastore.ParseRevision(revision)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	// Seed with the state the consumer has: at start, or now.
	ops := []clientv3.OpOption{clientv3.WithKeysOnly()}
	if prefix {
		ops = append(ops, clientv3.WithPrefix())
	}
	if start > 0 {
		ops = append(ops, clientv3.WithRev(start))
	}
	resp, err := s.client.Get(ctx, path, ops...)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil, &datastore.CompactedError{Revision: revision}
	}
	if err != nil {
		return nil, fmt.Errorf("watch %s from revision %q: %w", path, revision, err)
	}
	if start == 0 {
		start = resp.Header.Revision
	}
	w := s.newWatcher(ctx, path, prefix, start, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if _, _, err := s.Codec().ParseKey(key); err == nil {
			w.known[key] = delivered{modRev: kv.ModRevision, unchecked: true}
		}
	}
	go w.run()
	return w, nil
}

// WatchListed implements datastore.ListedWatcher: Watch from the revision
// of a List the caller made, seeded with the items that List returned
// instead of a second read of the same state. A revision compacted
// meanwhile is not an error: the watcher lists again and reports the
// difference, as after any compaction.
func (s *Store) WatchListed(ctx context.Context, opts datastore.ListOptions, revision string, listed []v3.Resource) (datastore.Watcher, error) {
	path, prefix, err := datastore.ListPath(opts)
	if err != nil {
		return nil, err
	}
	start, err := datastore.ParseRevision(revision)
	if err != nil || start == 0 {
		return nil, fmt.Errorf("watch %s: the revision of a list is needed, not %q", path, revision)
	}
	w := s.newWatcher(ctx, path, prefix, start, len(listed))
	for _, r := range listed {
		key, err := datastore.KeyPath(datastore.KeyOf(r))
		if err != nil {
			w.cancel()
			return nil, fmt.Errorf("watch %s: a listed item: %w", path, err)
		}
		rv, err := datastore.ParseRevision(r.GetObjectMeta().ResourceVersion)
		if err != nil {
			w.cancel()
			return nil, fmt.Errorf("watch %s: listed %s: %w", path, key, err)
		}
		w.known[key] = delivered{modRev: rv}
	}
	go w.run()
	return w, nil
}

// newWatcher is a watcher of path from revision start, not yet running.
func (s *Store) newWatcher(ctx context.Context, path string, prefix bool, start int64, size int) *watcher {
	w := &watcher{
		store:  s,
		path:   path,
		prefix: prefix,
		events: make(chan datastore.Event, watchBuffer),
		done:   make(chan struct{}),
		known:  make(map[string]delivered, size),
		rev:    start,
		log:    log.WithField("watch", path),
	}
	w.ctx, w.cancel = context.WithCancel(ctx)
	return w
}

// Events is the channel of changes, closed when the watcher ends.
func (w *watcher) Events() <-chan datastore.Event { return w.events }

// Stop ends the watcher and waits until its channel is closed.
func (w *watcher) Stop() {
	w.cancel()
	<-w.done
}

// run watches from w.rev+1 until stopped, listing again whenever etcd says
// the history it needs was compacted.
func (w *watcher) run() {
	defer close(w.done)
	defer close(w.events)
	for {
		resync, ok := w.follow()
		if !ok {
			return
		}
		if w.store.client.Ctx().Err() != nil {
			w.send(datastore.Event{Type: datastore.Error, Err: fmt.Errorf("watch %s: etcd client closed", w.path)})
			return
		}
		if !w.pause() {
			return
		}
		if resync && !w.resync() {
			return
		}
	}
}

// follow runs one etcd watch stream. It returns resync=true when the
// stream ended because of compaction, and ok=false when the watcher is
// stopped.
func (w *watcher) follow() (resync, ok bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	ops := []clientv3.OpOption{clientv3.WithRev(w.rev + 1), clientv3.WithPrevKV()}
	if w.prefix {
		ops = append(ops, clientv3.WithPrefix())
	}
	for resp := range w.store.client.Watch(ctx, w.path, ops...) {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			w.log.WithFields(log.Fields{"from": w.rev + 1, "compacted": resp.CompactRevision}).Info("Watch history compacted; listing again")
			return true, w.ctx.Err() == nil
		}
		if err := resp.Err(); err != nil {
			// Losing etcd is the agent's to report, once; a watcher
			// only says so at debug level and carries on.
			w.log.WithError(err).Log(logLevelFor(err), "Watch stream failed; watching again")
			return false, w.ctx.Err() == nil
		}
		for _, ev := range resp.Events {
			if !w.deliver(ev) {
				return false, false
			}
		}
	}
	return false, w.ctx.Err() == nil
}

// pause waits before the next attempt; false when stopped meanwhile.
func (w *watcher) pause() bool {
	t := time.NewTimer(retryDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// send hands one event to the consumer; false when stopped meanwhile.
func (w *watcher) send(e datastore.Event) bool {
	select {
	case w.events <- e:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// deliver turns one etcd event into a datastore event, skipping what the
// consumer already has and keys it never saw being deleted.
func (w *watcher) deliver(ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	rev := ev.Kv.ModRevision
	defer func() {
		if rev > w.rev {
			w.rev = rev
		}
	}()
	prev, had := w.known[key]
	if had && rev <= prev.modRev {
		return true // already delivered
	}
	if ev.Type == mvccpb.DELETE {
		if !had {
			return true
		}
		delete(w.known, key)
		if prev.bad || (prev.unchecked && !w.validPrev(key, ev.PrevKv, prev.modRev)) {
			return true // the consumer never had it
		}
		return w.sendGone(key, ev.PrevKv, prev.modRev, rev)
	}
	if _, _, err := w.store.Codec().ParseKey(key); err != nil {
		return true // a kind this build does not know
	}
	return w.emitPut(key, ev.Kv.Value, rev, ev.PrevKv, prev, had)
}

// validPrev says whether etcd's previous key-value of key, at modRev,
// was a valid resource (true when it is not known).
func (w *watcher) validPrev(key string, prevKV *mvccpb.KeyValue, modRev int64) bool {
	if prevKV == nil || prevKV.ModRevision != modRev {
		return true
	}
	_, err := w.store.Codec().Decode(key, prevKV.Value, modRev)
	return !errors.Is(err, datastore.ErrBadValue)
}

// sendGone reports the deletion, at eventRev, of the valid value the
// consumer holds for key (at revision modRev): etcd's previous key-value
// when the event carried it, else what the watcher knows (lastKnown).
func (w *watcher) sendGone(key string, prevKV *mvccpb.KeyValue, modRev, eventRev int64) bool {
	var obj v3.Resource
	if prevKV != nil && prevKV.ModRevision == modRev {
		obj, _ = w.store.Codec().Decode(key, prevKV.Value, modRev)
	}
	if obj == nil {
		var err error
		if obj, err = lastKnown(w.store.Codec(), key, modRev); err != nil {
			return w.send(datastore.Event{Type: datastore.Error, Revision: strconv.FormatInt(eventRev, 10), Err: err})
		}
	}
	return w.send(datastore.Event{Type: datastore.Deleted, Object: obj, Revision: strconv.FormatInt(eventRev, 10)})
}

// lastKnown is what a deletion reports when its last value is gone with
// the compacted history: the resource's kind, namespace and name, and
// the revision the consumer last had it at, no spec. That is all the
// consumers read of a deletion (the key), as Calico's syncer reports a
// deletion found by listing again with its key alone.
func lastKnown(codec *datastore.Codec, key string, modRev int64) (v3.Resource, error) {
	k, info, err := codec.ParseKey(key)
	if err != nil {
		return nil, err
	}
	obj := info.New()
	m := obj.GetObjectMeta()
	m.Name, m.Namespace = k.Name, k.Namespace
	m.ResourceVersion = strconv.FormatInt(modRev, 10)
	return obj, nil
}

// emitPut reports the new value of key (prev, when had, is what the
// watcher last recorded for it; prevKV etcd's previous key-value, when
// the event carried it): Added or Modified; or, when the value is not a
// valid resource, nothing (it is logged once and counted), or the
// deletion of the valid value the consumer had, so that Watch agrees with
// List, which skips such values.
func (w *watcher) emitPut(key string, value []byte, rev int64, prevKV *mvccpb.KeyValue, prev delivered, had bool) bool {
	codec := w.store.Codec()
	// had: the consumer has the previous value.
	had = had && !prev.bad && (!prev.unchecked || w.validPrev(key, prevKV, prev.modRev))
	obj, err := codec.Decode(key, value, rev)
	if errors.Is(err, datastore.ErrBadValue) {
		w.store.BadValues().Record(err)
		w.known[key] = delivered{modRev: rev, bad: true}
		if !had {
			return true
		}
		return w.sendGone(key, prevKV, prev.modRev, rev)
	}
	w.known[key] = delivered{modRev: rev}
	eventRev := strconv.FormatInt(rev, 10)
	if err != nil {
		return w.send(datastore.Event{Type: datastore.Error, Revision: eventRev, Err: err})
	}
	typ := datastore.Added
	if had {
		typ = datastore.Modified
	}
	return w.send(datastore.Event{Type: typ, Object: obj, Revision: eventRev})
}

// resync lists the current state and reports what differs from what the
// consumer has: deletions first (by key), then additions and changes in
// revision order. It retries until it succeeds or the watcher is stopped.
func (w *watcher) resync() bool {
	var resp *clientv3.GetResponse
	for {
		ops := []clientv3.OpOption{}
		if w.prefix {
			ops = append(ops, clientv3.WithPrefix())
		}
		var err error
		resp, err = w.store.client.Get(w.ctx, w.path, ops...)
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			return false
		}
		w.log.WithError(err).Log(logLevelFor(err), "Listing again after compaction failed; retrying")
		if !w.pause() {
			return false
		}
	}
	now := resp.Header.Revision
	present := make(map[string]bool, len(resp.Kvs))
	var changed []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if _, _, err := w.store.Codec().ParseKey(key); err != nil {
			continue
		}
		present[key] = true
		if prev, had := w.known[key]; !had || prev.modRev != kv.ModRevision {
			changed = append(changed, kv)
		}
	}
	var gone []string
	for key := range w.known {
		if !present[key] {
			gone = append(gone, key)
		}
	}
	sort.Strings(gone)
	for _, key := range gone {
		prev := w.known[key]
		delete(w.known, key)
		if !prev.bad && !w.sendGone(key, nil, prev.modRev, now) {
			return false
		}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].ModRevision < changed[j].ModRevision })
	for _, kv := range changed {
		key := string(kv.Key)
		prev, had := w.known[key]
		if !w.emitPut(key, kv.Value, kv.ModRevision, nil, prev, had) {
			return false
		}
	}
	w.rev = now
	return true
}
