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

// delivered is what the consumer last saw of one key.
type delivered struct {
	modRev int64
	value  []byte
	// bad: the value is not a valid resource, so the consumer does not
	// have it (List skips such values, and so does the watcher).
	bad bool
	// unchecked: seeded from the start revision and not decoded yet.
	unchecked bool
}

// watcher follows one key or prefix. It remembers what it delivered for
// every key (seeded with the state at the start revision), so that after a
// compaction it can list again and report just the difference.
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
	ops := []clientv3.OpOption{}
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
	w := &watcher{
		store:  s,
		path:   path,
		prefix: prefix,
		events: make(chan datastore.Event, watchBuffer),
		done:   make(chan struct{}),
		known:  make(map[string]delivered, len(resp.Kvs)),
		rev:    start,
		log:    log.WithField("watch", path),
	}
	if start == 0 {
		w.rev = resp.Header.Revision
	}
	for _, kv := range resp.Kvs {
		if _, _, err := s.Codec().ParseKey(string(kv.Key)); err == nil {
			w.known[string(kv.Key)] = delivered{modRev: kv.ModRevision, value: kv.Value, unchecked: true}
		}
	}
	w.ctx, w.cancel = context.WithCancel(ctx)
	go w.run()
	return w, nil
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
		value, modRev := prev.value, prev.modRev
		if ev.PrevKv != nil {
			value, modRev = ev.PrevKv.Value, ev.PrevKv.ModRevision
		}
		return w.emit(datastore.Deleted, key, value, modRev, rev)
	}
	if _, _, err := w.store.Codec().ParseKey(key); err != nil {
		return true // a kind this build does not know
	}
	return w.emitPut(key, ev.Kv.Value, rev, prev, had)
}

// emit decodes a deleted value and sends the event; a value the consumer
// never had (it was not a valid resource) is not reported. An Error event
// reports any other decoding failure.
func (w *watcher) emit(typ datastore.EventType, key string, value []byte, modRev, eventRev int64) bool {
	obj, err := w.store.Codec().Decode(key, value, modRev)
	if errors.Is(err, datastore.ErrBadValue) {
		return true
	}
	if err != nil {
		return w.send(datastore.Event{Type: datastore.Error, Revision: strconv.FormatInt(eventRev, 10), Err: err})
	}
	return w.send(datastore.Event{Type: typ, Object: obj, Revision: strconv.FormatInt(eventRev, 10)})
}

// emitPut reports the new value of key (prev, when had, is what the
// watcher last recorded for it): Added or Modified; or, when the value is
// not a valid resource, nothing (it is logged once and counted), or the
// deletion of the valid value the consumer had, so that Watch agrees with
// List, which skips such values.
func (w *watcher) emitPut(key string, value []byte, rev int64, prev delivered, had bool) bool {
	codec := w.store.Codec()
	eventRev := strconv.FormatInt(rev, 10)
	// gone is the deletion of the previous value, should it be reported.
	gone := datastore.Event{Type: datastore.Deleted, Revision: eventRev}
	if had && prev.unchecked {
		gone.Object, _ = codec.Decode(key, prev.value, prev.modRev)
	}
	// had: the consumer has the previous value.
	had = had && !prev.bad && (!prev.unchecked || gone.Object != nil)
	obj, err := codec.Decode(key, value, rev)
	if errors.Is(err, datastore.ErrBadValue) {
		w.store.BadValues().Record(err)
		w.known[key] = delivered{modRev: rev, value: value, bad: true}
		if !had {
			return true
		}
		if gone.Object == nil {
			if gone.Object, err = codec.Decode(key, prev.value, prev.modRev); err != nil {
				return true
			}
		}
		return w.send(gone)
	}
	w.known[key] = delivered{modRev: rev, value: value}
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
		if !w.emit(datastore.Deleted, key, prev.value, prev.modRev, now) {
			return false
		}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].ModRevision < changed[j].ModRevision })
	for _, kv := range changed {
		key := string(kv.Key)
		prev, had := w.known[key]
		if !w.emitPut(key, kv.Value, kv.ModRevision, prev, had) {
			return false
		}
	}
	w.rev = now
	return true
}
