package datastore

import (
	"errors"
	"fmt"
)

// Sentinel errors: every typed error below matches one of them with
// errors.Is, so callers that need no details can write
// errors.Is(err, datastore.ErrNotFound).
var (
	ErrNotFound      = errors.New("resource does not exist")
	ErrAlreadyExists = errors.New("resource already exists")
	ErrConflict      = errors.New("update conflict")
	// ErrCompacted is returned by Watch when the revision to start from
	// has been compacted away: the caller must List again.
	ErrCompacted = errors.New("revision has been compacted")
	// ErrBatchRejected is returned by WriteBatch when a precondition of
	// one of its writes failed, so nothing was written.
	ErrBatchRejected = errors.New("batch rejected: a resource changed since it was read")
	// ErrUnavailable is returned when the datastore could not be reached
	// or dropped the connection mid-request: trying again later may work.
	ErrUnavailable = errors.New("datastore unavailable")
)

// subject names what an error is about: a resource key when Key names
// one, otherwise a raw path.
func subject(k Key, path string) string {
	if k.Kind != "" && (k.Name != "" || path == "") {
		return k.String()
	}
	return fmt.Sprintf("key %q", path)
}

// NotFoundError says a resource (Key) or raw key (Path) does not exist.
type NotFoundError struct {
	Key  Key
	Path string
}

func (e *NotFoundError) Error() string {
	return subject(e.Key, e.Path) + ": " + ErrNotFound.Error()
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// AlreadyExistsError says a create found the resource or key already there.
type AlreadyExistsError struct {
	Key  Key
	Path string
	// Revision is the mod revision of the existing value.
	Revision string
}

func (e *AlreadyExistsError) Error() string {
	return subject(e.Key, e.Path) + ": " + ErrAlreadyExists.Error()
}

// Is makes errors.Is(err, ErrAlreadyExists) true.
func (e *AlreadyExistsError) Is(target error) bool { return target == ErrAlreadyExists }

// ConflictError says an update or delete carried a stale revision.
type ConflictError struct {
	Key  Key
	Path string
	// Op is "update" or "delete".
	Op string
	// Revision is the stale revision the caller sent, Current the one
	// stored.
	Revision, Current string
}

func (e *ConflictError) Error() string {
	what := "resourceVersion"
	if e.Key.Kind == "" {
		what = "revision"
	}
	return fmt.Sprintf("%s: %s conflict: %s %s is stale (current %s)",
		subject(e.Key, e.Path), e.Op, what, e.Revision, e.Current)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CompactedError says a watch asked for a revision older than the oldest
// one the datastore still keeps.
type CompactedError struct {
	Revision, Compacted string
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("watch from revision %s: %s (oldest kept is %s); list again", e.Revision, ErrCompacted, e.Compacted)
}

// Is makes errors.Is(err, ErrCompacted) true.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// BatchRejectedError says a WriteBatch wrote nothing because a resource it
// named was created, changed or deleted since the caller read it. The
// caller writes the batch's resources one by one to learn which.
type BatchRejectedError struct {
	// Writes is the number of writes in the rejected batch.
	Writes int
}

func (e *BatchRejectedError) Error() string {
	return fmt.Sprintf("%s (%d writes)", ErrBatchRejected.Error(), e.Writes)
}

// Is makes errors.Is(err, ErrBatchRejected) true.
func (e *BatchRejectedError) Is(target error) bool { return target == ErrBatchRejected }

// UnavailableError says a request could not reach the datastore at
// Endpoint, or lost its connection before the answer (so it may or may
// not have been applied).
type UnavailableError struct {
	Endpoint string
	Err      error
}

func (e *UnavailableError) Error() string { return e.Endpoint + ": " + e.Err.Error() }

// Unwrap exposes the network error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// ErrBadValue is matched (errors.Is) by *BadValueError.
var ErrBadValue = errors.New("stored value is not a valid resource")

// BadValueError says the value stored under a resource key is not the
// resource the key names: it is not JSON of the kind's type, or its kind,
// apiVersion, name or namespace differ from the key's. Readers skip such a
// value (List, Watch) or fail with this error (Get); Delete removes it and
// says so with Deleted set.
type BadValueError struct {
	Key  Key
	Path string
	// Revision is the mod revision of the bad value.
	Revision int64
	// Reason says what is wrong with it.
	Reason error
	// Deleted is set when a Delete removed the value.
	Deleted bool
}

func (e *BadValueError) Error() string {
	what := "stored value"
	if e.Deleted {
		what = "deleted value"
	}
	return fmt.Sprintf("%s: %s (revision %d) is not a valid resource: %v", subject(e.Key, e.Path), what, e.Revision, e.Reason)
}

// Unwrap exposes the reason.
func (e *BadValueError) Unwrap() error { return e.Reason }

// Is makes errors.Is(err, ErrBadValue) true.
func (e *BadValueError) Is(target error) bool { return target == ErrBadValue }
