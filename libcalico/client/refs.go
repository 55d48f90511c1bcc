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

// missingRefError refuses a resource that names another which does not
// exist, as Calico does: a policy created in a missing tier, a BGPPeer
// naming a missing BGPFilter. It unwraps to the missing one's not-found
// error.
type missingRefError struct {
	from datastore.Key
	ref  *datastore.NotFoundError
	// format gets from and the missing resource's name.
	format string
}

func (e *missingRefError) Error() string { return fmt.Sprintf(e.format, e.from, e.ref.Key.Name) }

func (e *missingRefError) Unwrap() error { return e.ref }

// missingTier and missingFilter are the two references checked.
func missingTier(policy, tier datastore.Key) error {
	return &missingRefError{from: policy, ref: &datastore.NotFoundError{Key: tier}, format: "%s is in tier %q, which does not exist"}
}

func missingFilter(peer, filter datastore.Key) error {
	return &missingRefError{from: peer, ref: &datastore.NotFoundError{Key: filter},
		format: "%s: spec.filters names BGPFilter %q, which does not exist: create the filter first"}
}
