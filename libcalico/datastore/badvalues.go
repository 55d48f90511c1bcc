package datastore

import (
	"context"
	"errors"
	"maps"
	"sync"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// maxRemembered bounds how many bad values a BadValues remembers having
// logged; past it, it forgets them all and may log some a second time.
const maxRemembered = 4096

// BadValues logs and counts the stored values readers skipped because they
// are not valid resources (see BadValueError) or not usable by the reader
// (an IP pool whose CIDR does not parse, say). Each value, by key and
// revision, is logged once at warning level, with its key and the reason,
// and counted once, however often it is read again; a new bad value under
// the same key is logged and counted again. The counts are what a metric
// of skipped values exports. It is safe for concurrent use; the zero value
// is ready.
type BadValues struct {
	mu     sync.Mutex
	logged map[string]int64 // path → revision last logged
	byKind map[string]uint64
	total  uint64
}

// Record logs and counts a skipped value once, and reports whether this
// was the first time. Errors that are not a *BadValueError are logged each
// time and not counted.
func (b *BadValues) Record(err error) bool {
	var bv *BadValueError
	if !errors.As(err, &bv) {
		log.WithError(err).Warn("Skipping a stored value that could not be read")
		return true
	}
	return b.Skip(bv.Path, bv.Key.Kind, bv.Revision, bv.Reason)
}

// Skip is Record for a value a reader found unusable itself: the value at
// path (of kind, at revision) is skipped because of reason.
func (b *BadValues) Skip(path, kind string, revision int64, reason error) bool {
	b.mu.Lock()
	if rev, ok := b.logged[path]; ok && rev == revision {
		b.mu.Unlock()
		return false
	}
	if b.logged == nil || len(b.logged) >= maxRemembered {
		b.logged = map[string]int64{}
	}
	if b.byKind == nil {
		b.byKind = map[string]uint64{}
	}
	b.logged[path] = revision
	b.byKind[kind]++
	b.total++
	b.mu.Unlock()
	log.WithFields(log.Fields{"key": path, "revision": revision}).WithError(reason).Warn("Skipping a stored value that is not a valid resource")
	return true
}

// Total is how many bad values have been skipped.
func (b *BadValues) Total() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// ByKind is how many bad values of each kind have been skipped (IPAM's
// own values under "ipam/block", "ipam/affinity" and "ipam/handle").
func (b *BadValues) ByKind() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.byKind)
}

// BadValuesReporter is implemented by stores that keep a BadValues.
type BadValuesReporter interface {
	BadValues() *BadValues
}

// BadValuesOf returns the BadValues of store, or a fresh one when the
// store keeps none (for a reader that wraps a store).
func BadValuesOf(store any) *BadValues {
	if r, ok := store.(BadValuesReporter); ok {
		if b := r.BadValues(); b != nil {
			return b
		}
	}
	return &BadValues{}
}

// BadValueLister is implemented by stores whose List can also return the
// values it skipped.
type BadValueLister interface {
	// ListWithBadValues is List that also returns a *BadValueError for
	// each value it skipped, in key order.
	ListWithBadValues(ctx context.Context, opts ListOptions) (items []v3.Resource, bad []*BadValueError, revision string, err error)
}
