package etcdcore

import (
	"context"
	"errors"
	"strconv"
	"sync"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Store implements every method of datastore.Interface but Watch over a
// Transport; the clients embed it and add Watch. It is safe for concurrent
// use.
type Store struct {
	tr        Transport
	codec     *datastore.Codec
	bad       *datastore.BadValues
	closeOnce sync.Once
	closeErr  error
}

// NewStore serves resources and raw keys over tr, which it closes on
// Close.
func NewStore(tr Transport) *Store {
	return &Store{tr: tr, codec: datastore.NewCodec(), bad: &datastore.BadValues{}}
}

// Codec is the resource codec the store encodes and decodes with.
func (s *Store) Codec() *datastore.Codec { return s.codec }

// BadValues logs and counts the stored values that are not valid
// resources, as the store's readers skip them.
func (s *Store) BadValues() *datastore.BadValues { return s.bad }

// Close closes the transport; calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.tr.Close()
		if errors.Is(s.closeErr, context.Canceled) {
			s.closeErr = nil
		}
	})
	return s.closeErr
}

// revString formats a mod revision as a resourceVersion.
func revString(rev int64) string { return strconv.FormatInt(rev, 10) }

// setRevision stamps a returned object with the revision it was stored at.
func setRevision(r v3.Resource, rev int64) v3.Resource {
	r.GetObjectMeta().ResourceVersion = revString(rev)
	return r
}

// firstKV is the first key of the first result of a transaction's branch,
// if any.
func firstKV(resp TxnResult) (KeyValue, bool) {
	if len(resp.Results) == 0 || len(resp.Results[0].KVs) == 0 {
		return KeyValue{}, false
	}
	return resp.Results[0].KVs[0], true
}
