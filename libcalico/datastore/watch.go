package datastore

import (
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
	// Object is the new state, or for Deleted the last known state.
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
