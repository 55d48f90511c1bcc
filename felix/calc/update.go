package calc

import (
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Update is one change of the datastore as the syncer reports it: the
// resource's new state, or a nil Value when it was deleted.
type Update struct {
	Key   datastore.Key
	Value v3.Resource
}

// Callbacks receive the syncer's output: batches of updates, then once the
// first complete read of every kind has been delivered, OnInSync. A Graph
// implements it.
type Callbacks interface {
	OnUpdates(updates []Update)
	OnInSync()
}

// ResyncObserver is implemented by Callbacks that want to know when the
// syncer lists a kind again (a watch ended or failed, or a list failed);
// OnResync is called from the kind's own goroutine.
type ResyncObserver interface {
	OnResync(kind string)
}
