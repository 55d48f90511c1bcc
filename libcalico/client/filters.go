package client

import (
	"fmt"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// neededFilters are the BGPFilters a BGPPeer names in spec.filters, which
// must be stored (or written earlier in the batch) for the peer to be
// written, as Calico refuses a peer naming a filter that does not exist.
func neededFilters(r v3.Resource) []datastore.Key {
	peer, ok := r.(*v3.BGPPeer)
	if !ok {
		return nil
	}
	out := make([]datastore.Key, 0, len(peer.Spec.Filters))
	for _, f := range peer.Spec.Filters {
		out = append(out, datastore.Key{Kind: v3.KindBGPFilter, Name: f})
	}
	return out
}

// missingFilterError refuses a BGPPeer naming a BGPFilter that does not
// exist.
type missingFilterError struct {
	peer   datastore.Key
	filter *datastore.NotFoundError
}

func (e *missingFilterError) Error() string {
	return fmt.Sprintf("%s: spec.filters names BGPFilter %q, which does not exist: create the filter first", e.peer, e.filter.Key.Name)
}

func (e *missingFilterError) Unwrap() error { return e.filter }
