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
	// Update replaces an existing resource (or a stored value that is
	// not a valid resource). When metadata.resourceVersion
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
	// When the stored value was not a valid resource it is deleted all
	// the same and the error is a *BadValueError with Deleted set.
	Delete(ctx context.Context, k Key, resourceVersion string) (v3.Resource, error)
	// Get reads one resource (*NotFoundError when absent,
	// *BadValueError when the stored value is not a valid resource).
	Get(ctx context.Context, k Key) (v3.Resource, error)
	// List reads what opts selects, sorted by key, with the revision the
	// list is consistent at (the revision to Watch from). Stored values
	// that are not valid resources are skipped (logged once and counted;
	// see BadValues and BadValueLister).
	List(ctx context.Context, opts ListOptions) (items []v3.Resource, revision string, err error)
	// Watch reports every change after revision (or after "now" when it
	// is empty) of what opts selects, until ctx ends or Stop is called.
	// It agrees with List about values that are not valid resources:
	// they are skipped, and one that replaces a valid value the consumer
	// has is reported as the deletion of that value.
	// When the history it needs was compacted while it ran, it lists again
	// and reports exactly the changes the consumer has not seen (a
	// deletion found so carries only the resource's key and last
	// resourceVersion: see ListedWatcher). A
	// revision already compacted when Watch is called fails with
	// *CompactedError.
	Watch(ctx context.Context, opts ListOptions, revision string) (Watcher, error)
	// WriteBatch stores every write in one transaction: all of them or,
	// when any precondition fails, none (*BatchRejectedError). It lets a
	// caller that has already read and checked many resources write them
	// in one round trip. See BatchWrite for the preconditions.
	WriteBatch(ctx context.Context, writes []BatchWrite) ([]v3.Resource, error)
	// Close releases the connection.
	Close() error
}

// BatchWrite is one write of a WriteBatch. With Create the key must be
// free and the resource gets a fresh uid and creationTimestamp. Otherwise
// the resource replaces the stored one, which must still be at
// metadata.resourceVersion (required); uid and creationTimestamp are taken
// from the resource as given, so the caller copies them from what it read.
// A batch names each key at most once.
type BatchWrite struct {
	Resource v3.Resource
	Create   bool
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
	// Txn applies ops atomically, in one round trip, if every cond holds,
	// and returns the store revision they were written at. When a cond
	// does not hold nothing is written and it fails with *ConflictError;
	// current then holds the present state of every single-key cond's key
	// (Revision 0 and a nil Value when absent), in cond order, so the
	// caller can retry without reading them again.
	Txn(ctx context.Context, conds []KVCond, ops []KVOp) (rev int64, current []KVPair, err error)
}

// KVCond is a condition of a KV transaction on one key or, with Prefix,
// on every key under Key.
type KVCond struct {
	Key    string
	Prefix bool
	// Revision is, for one key, the mod revision it must still have (0:
	// the key must not exist); for a prefix, the revision no key under it
	// may have been modified after (deletions under a prefix are not
	// seen: name the keys that must still exist one by one).
	Revision int64
}

// KVOp is one write of a KV transaction: a put of Value, or a delete.
type KVOp struct {
	Key    string
	Value  []byte
	Delete bool
}
