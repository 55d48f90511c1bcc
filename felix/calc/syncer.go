package calc

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// SyncedKinds returns the kinds felix reads.
func SyncedKinds() []string {
	return []string{
		v3.KindFelixConfiguration,
		v3.KindBGPConfiguration,
		v3.KindIPPool,
		v3.KindNode,
		v3.KindTier,
		v3.KindProfile,
		v3.KindGlobalNetworkPolicy,
		v3.KindNetworkPolicy,
		v3.KindGlobalNetworkSet,
		v3.KindNetworkSet,
		v3.KindHostEndpoint,
		v3.KindWorkloadEndpoint,
	}
}

// Syncer is the stage that reads the datastore: for each kind it lists
// then watches from the list's revision (listing again, and reporting what
// vanished, whenever a watch ends), and hands the changes to Callbacks in
// batches from one goroutine.
type Syncer struct {
	ds       datastore.Interface
	hostname string
	cb       Callbacks
	// RetryInterval is the pause before listing again after an error.
	RetryInterval time.Duration
	// MaxBatch bounds the updates of one OnUpdates call.
	MaxBatch int
	// Blocks, when set, is where the IPAM blocks are read (for the
	// overlay's routes); they count as one more kind for OnInSync.
	Blocks *BlockSource
}

// NewSyncer makes a syncer for the node hostname (whose
// FelixConfiguration `node.<hostname>` it passes along with `default`).
func NewSyncer(ds datastore.Interface, hostname string, cb Callbacks) *Syncer {
	return &Syncer{ds: ds, hostname: hostname, cb: cb, RetryInterval: time.Second, MaxBatch: 1000}
}

// kindBatch is what a kind's goroutine sends: updates, and whether they
// complete a list.
type kindBatch struct {
	kind    string
	updates []Update
	listed  bool
}

// Run syncs until ctx ends, then returns ctx.Err().
func (s *Syncer) Run(ctx context.Context) error {
	ch := make(chan kindBatch, 64)
	kinds := SyncedKinds()
	for _, kind := range kinds {
		go s.runKind(ctx, kind, ch)
	}
	if s.Blocks != nil {
		kinds = append(kinds, KindIPAMBlock)
		go s.runBlocks(ctx, ch)
	}
	listed := map[string]bool{}
	inSync := false
	for {
		var b kindBatch
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b = <-ch:
		}
		updates := b.updates
		if b.listed {
			listed[b.kind] = true
		}
	drain:
		for len(updates) < s.MaxBatch {
			select {
			case more := <-ch:
				updates = append(updates, more.updates...)
				if more.listed {
					listed[more.kind] = true
				}
			default:
				break drain
			}
		}
		if len(updates) > 0 {
			s.cb.OnUpdates(updates)
		}
		if !inSync && len(listed) == len(kinds) {
			inSync = true
			log.Info("Datastore in sync")
			s.cb.OnInSync()
		}
	}
}

func (s *Syncer) wanted(k datastore.Key) bool {
	switch k.Kind {
	case v3.KindFelixConfiguration:
		return k.Name == "default" || k.Name == "node."+s.hostname
	case v3.KindBGPConfiguration:
		return k.Name == "default" // its service ranges
	}
	return true
}

// runKind lists and watches one kind for ever.
func (s *Syncer) runKind(ctx context.Context, kind string, ch chan<- kindBatch) {
	known := map[datastore.Key]bool{}
	logc := log.WithField("kind", kind)
	send := sender(ctx, ch)
	resyncs, _ := s.cb.(ResyncObserver)
	for first := true; ctx.Err() == nil; first = false {
		if !first && resyncs != nil {
			resyncs.OnResync(kind)
		}
		items, rev, err := s.ds.List(ctx, datastore.ListOptions{Kind: kind})
		if err != nil {
			logc.WithError(err).Warn("Listing failed; retrying")
			s.pause(ctx)
			continue
		}
		// The watcher reads what it needs of items now, before they are
		// handed to the callbacks.
		w, err := s.watchFrom(ctx, kind, rev, items)
		if err != nil {
			logc.WithError(err).Warn("Watch failed; listing again")
			s.pause(ctx)
			continue
		}
		b := kindBatch{kind: kind, listed: true}
		seen := map[datastore.Key]bool{}
		for _, r := range items {
			k := datastore.KeyOf(r)
			if !s.wanted(k) {
				continue
			}
			seen[k] = true
			b.updates = append(b.updates, Update{Key: k, Value: r})
		}
		for k := range known {
			if !seen[k] {
				b.updates = append(b.updates, Update{Key: k})
			}
		}
		known = seen
		if !send(b) {
			w.Stop()
			return
		}
		s.watch(ctx, w, known, send, logc)
		w.Stop()
	}
}

// watchFrom watches kind from the revision of the list that returned
// items, handing the watcher those items where the store takes them
// (datastore.ListedWatcher), so the kind is read once, not twice.
func (s *Syncer) watchFrom(ctx context.Context, kind, rev string, items []v3.Resource) (datastore.Watcher, error) {
	opts := datastore.ListOptions{Kind: kind}
	if lw, ok := s.ds.(datastore.ListedWatcher); ok {
		return lw.WatchListed(ctx, opts, rev, items)
	}
	return s.ds.Watch(ctx, opts, rev)
}

func (s *Syncer) watch(ctx context.Context, w datastore.Watcher, known map[datastore.Key]bool,
	send func(kindBatch) bool, logc *log.Entry) {
	for {
		var ev datastore.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-w.Events():
		}
		if !ok {
			logc.Info("Watch ended; listing again")
			return
		}
		if ev.Type == datastore.Error {
			logc.WithError(ev.Err).Warn("Watch error")
			continue
		}
		k := datastore.KeyOf(ev.Object)
		if !s.wanted(k) {
			continue
		}
		u := Update{Key: k, Value: ev.Object}
		if ev.Type == datastore.Deleted {
			u.Value = nil
			delete(known, k)
		} else {
			known[k] = true
		}
		if !send(kindBatch{kind: k.Kind, updates: []Update{u}}) {
			return
		}
	}
}

// sender hands batches to the main loop; false once ctx ended.
func sender(ctx context.Context, ch chan<- kindBatch) func(kindBatch) bool {
	return func(b kindBatch) bool {
		select {
		case ch <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

func (s *Syncer) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(s.RetryInterval):
	}
}
