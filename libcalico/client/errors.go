package client

import (
	"errors"
	"fmt"
)

// Sentinel errors for the checks the client makes before writing. They are
// wrapped with the resource they are about; test with errors.Is.
var (
	// ErrScope: a namespace on a cluster-scoped kind.
	ErrScope = errors.New("namespace not allowed")
	// ErrInvalid: the resource failed validation.
	ErrInvalid = errors.New("invalid resource")
	// ErrImmutable: an update tried to change a field that is fixed once
	// the resource exists.
	ErrImmutable = errors.New("field is immutable")
	// ErrOverlap: an IP pool overlaps another.
	ErrOverlap = errors.New("IP pools overlap")
	// ErrNotSupported: an operation Calico does not allow on this resource
	// (deleting a built-in or non-empty tier).
	ErrNotSupported = errors.New("operation not supported")
)

// ruleError carries a readable message and the sentinel it matches.
type ruleError struct {
	msg  string
	kind error
}

func (e *ruleError) Error() string        { return e.msg }
func (e *ruleError) Is(target error) bool { return target == e.kind }

// ruleErrorf builds a ruleError matching kind.
func ruleErrorf(kind error, format string, args ...any) error {
	return &ruleError{msg: fmt.Sprintf(format, args...), kind: kind}
}
