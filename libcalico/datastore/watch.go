package datastore

import (
	"context"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// EventType says what happened to a resource.
type EventType int

// The event types a Watcher reports.
const (
	Added EventType = iota + 1
	Modified
	Deleted
	// Error carries Event.Err; the watcher goes on unless the channel is
	// closed right after.
	Error
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Modified:
		return "Modified"
	case Deleted:
		return "Deleted"
	case Error:
		return "Error"
	}
	return "Unknown"
}

// Event is one change seen by a Watcher.
type Event struct {
	Type EventType
	// Object is the new state, or for Deleted the last known state (after
	// a compaction, its key and resourceVersion only: see ListedWatcher).
	Object v3.Resource
	// Revision is the store revision of the change.
	Revision string
	// Err is set on Error events.
	Err error
}

// Watcher delivers events in revision order on Events until Stop is
// called or its context ends; then the channel is closed.
type Watcher interface {
	Events() <-chan Event
	Stop()
}

// ListedWatcher is a store whose Watch can start from a List the caller
// has just made, given the items it returned: the watcher learns what the
// consumer holds from them instead of reading the same state again (the
// etcd v3 store implements it; felix's syncer uses it, so an agent
// starting up reads the datastore once). Deleted events carry the last
// value the consumer had, except a deletion found by listing again after
// a compaction, which carries the resource's kind, namespace, name and
// last resourceVersion only (its value is gone with the history).
type ListedWatcher interface {
	WatchListed(ctx context.Context, opts ListOptions, revision string, listed []v3.Resource) (Watcher, error)
}
