package etcdcore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// minPerDecoder is the fewest items worth a decoding goroutine of their
// own.
const minPerDecoder = 256

// List reads what opts selects in one range request, so the result is
// one consistent snapshot, and decodes it. Values that are not valid
// resources are skipped, each logged once and counted in BadValues.
func (s *Store) List(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, string, error) {
	items, _, rev, err := s.ListWithBadValues(ctx, opts)
	return items, rev, err
}

// ListWithBadValues is List that also returns the values it skipped.
func (s *Store) ListWithBadValues(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, []*datastore.BadValueError, string, error) {
	path, prefix, err := datastore.ListPath(opts)
	if err != nil {
		return nil, nil, "", err
	}
	if pr, ok := s.tr.(PagedRanger); ok && prefix {
		return s.listPaged(ctx, pr, opts.Kind, path)
	}
	resp, err := s.tr.Range(ctx, path, prefix)
	if err != nil {
		return nil, nil, "", fmt.Errorf("listing %s: %w", path, err)
	}
	items, bad, err := s.decodeAll(opts.Kind, resp.KVs)
	if err != nil {
		return nil, nil, "", err
	}
	return items, bad, revString(resp.Revision), nil
}

// listPage is how many keys one page of a paged List reads.
const listPage = 2000

// page is one page of a paged List on its way to the decoder.
type page struct {
	kvs []KeyValue
	err error
}

// listPaged reads the prefix in pages pinned to the first page's revision
// (one consistent snapshot) and decodes each page while the next one is
// being read, so a large List costs little more than the read itself. A
// list that fits in one page is one request, as before.
func (s *Store) listPaged(ctx context.Context, pr PagedRanger, kind, prefix string) ([]v3.Resource, []*datastore.BadValueError, string, error) {
	end := PrefixEnd(prefix)
	first, more, err := pr.RangePage(ctx, prefix, end, 0, listPage)
	if err != nil {
		return nil, nil, "", fmt.Errorf("listing %s: %w", prefix, err)
	}
	rev := first.Revision
	pages := make(chan page, 4)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(pages)
		kvs := first.KVs
		for more {
			from := kvs[len(kvs)-1].Key + "\x00"
			next, m, err := pr.RangePage(ctx, from, end, rev, listPage)
			if err != nil {
				pages <- page{err: fmt.Errorf("listing %s at revision %d: %w", prefix, rev, err)}
				return
			}
			kvs, more = next.KVs, m
			select {
			case pages <- page{kvs: kvs}:
			case <-ctx.Done():
				return
			}
		}
	}()
	items, bad, err := s.decodeAll(kind, first.KVs)
	if err != nil {
		return nil, nil, "", err
	}
	for p := range pages {
		if p.err != nil {
			return nil, nil, "", p.err
		}
		decoded, b, err := s.decodeAll(kind, p.kvs)
		if err != nil {
			return nil, nil, "", err
		}
		items = append(items, decoded...)
		bad = append(bad, b...)
	}
	return items, bad, revString(rev), nil
}

// decodeAll decodes a range result. With a kind, every key is read as
// that kind; without one (a list of everything), keys of kinds this build
// does not know are skipped. A value that is not a valid resource (or a
// key of the kind with the wrong number of segments) is left out of the
// items, recorded in BadValues and returned in bad. Large results are
// decoded on every CPU at once: JSON decoding, not etcd, is most of the
// cost of a big List.
func (s *Store) decodeAll(kind string, kvs []KeyValue) ([]v3.Resource, []*datastore.BadValueError, error) {
	var info v3.KindInfo
	if kind != "" {
		var ok bool
		if info, ok = v3.KindByName(kind); !ok {
			return nil, nil, fmt.Errorf("kind %q is not a known resource kind", kind)
		}
	}
	items := make([]v3.Resource, len(kvs))
	var badMu sync.Mutex
	var bad []*datastore.BadValueError
	decodeRange := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			kv := &kvs[i]
			var err error
			if kind != "" {
				items[i], err = s.codec.DecodeKind(info, kv.Key, kv.Value, kv.ModRevision)
			} else if _, _, perr := s.codec.ParseKey(kv.Key); perr != nil {
				log.WithField("key", kv.Key).WithError(perr).Debug("Skipping key of an unknown kind")
			} else {
				items[i], err = s.codec.Decode(kv.Key, kv.Value, kv.ModRevision)
			}
			if err == nil {
				continue
			}
			var bv *datastore.BadValueError
			if !errors.As(err, &bv) {
				// A key of the kind that is not a resource key.
				bv = &datastore.BadValueError{Key: datastore.Key{Kind: info.Kind}, Path: kv.Key, Revision: kv.ModRevision, Reason: err}
			}
			items[i] = nil
			badMu.Lock()
			bad = append(bad, bv)
			badMu.Unlock()
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(kvs)/minPerDecoder)
	if workers <= 1 {
		decodeRange(0, len(kvs))
	} else {
		var wg sync.WaitGroup
		per := (len(kvs) + workers - 1) / workers
		for w := range workers {
			lo, hi := w*per, min((w+1)*per, len(kvs))
			wg.Go(func() { decodeRange(lo, hi) })
		}
		wg.Wait()
	}
	if kind == "" || len(bad) > 0 {
		items = slices.DeleteFunc(items, func(r v3.Resource) bool { return r == nil })
	}
	if len(bad) > 0 {
		slices.SortFunc(bad, func(a, b *datastore.BadValueError) int { return strings.Compare(a.Path, b.Path) })
		for _, bv := range bad {
			s.bad.Record(bv)
		}
	}
	return items, bad, nil
}
