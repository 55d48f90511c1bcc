package datastore

import (
	"context"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Interface stores projectcalico.org/v3 resources. Every resource returned
// is a fresh object the caller owns, with metadata.resourceVersion set to
// the revision it was stored at. Inputs are never modified.
type Interface interface {
	// Create stores a new resource, setting its uid and creationTimestamp.
	// It fails with *AlreadyExistsError when the key is taken.
	Create(ctx context.Context, r v3.Resource) (v3.Resource, error)
	// Update replaces an existing resource. When metadata.resourceVersion
	// is set it is a compare-and-swap (a stale one fails with
	// *ConflictError); when empty the write is unconditional. uid and
	// creationTimestamp are kept from the stored resource. A missing
	// resource fails with *NotFoundError.
	Update(ctx context.Context, r v3.Resource) (v3.Resource, error)
	// Apply creates or replaces a resource (upsert), keeping the uid and
	// creationTimestamp of an existing one. A set resourceVersion is
	// checked as in Update.
	Apply(ctx context.Context, r v3.Resource) (v3.Resource, error)
	// Delete removes a resource and returns its last state. A non-empty
	// resourceVersion must match the stored one (else *ConflictError).
	Delete(ctx context.Context, k Key, resourceVersion string) (v3.Resource, error)
	// Get reads one resource (*NotFoundError when absent).
	Get(ctx context.Context, k Key) (v3.Resource, error)
	// List reads what opts selects, sorted by key, with the revision the
	// list is consistent at (the revision to Watch from).
	List(ctx context.Context, opts ListOptions) (items []v3.Resource, revision string, err error)
	// Watch reports every change after revision (or after "now" when it
	// is empty) of what opts selects, until ctx ends or Stop is called.
	// When the history it needs was compacted while it ran, it lists again
	// and reports exactly the changes the consumer has not seen. A
	// revision already compacted when Watch is called fails with
	// *CompactedError.
	Watch(ctx context.Context, opts ListOptions, revision string) (Watcher, error)
	// Close releases the connection.
	Close() error
}

// KVPair is one raw key with its value and mod revision (0 for a pair not
// yet stored).
type KVPair struct {
	Key      string
	Value    []byte
	Revision int64
}

// KV stores raw values under arbitrary keys, for IPAM, whose blocks,
// affinities and handles live under IPAMPrefix. Errors are the same typed
// errors as Interface's, with Path set instead of Key.
type KV interface {
	// Get reads one key (*NotFoundError when absent).
	Get(ctx context.Context, key string) (KVPair, error)
	// List reads every key under prefix, sorted, with the store revision.
	List(ctx context.Context, prefix string) ([]KVPair, int64, error)
	// Create stores a new key (*AlreadyExistsError when taken).
	Create(ctx context.Context, p KVPair) (KVPair, error)
	// Update replaces a key if its mod revision still equals p.Revision
	// (*ConflictError otherwise, *NotFoundError when absent). A zero
	// Revision is an unconditional write of an existing key.
	Update(ctx context.Context, p KVPair) (KVPair, error)
	// Delete removes a key if its mod revision equals revision (any when
	// 0).
	Delete(ctx context.Context, key string, revision int64) error
}
