package ipam

import "errors"

// Sentinel errors, matched with errors.Is; the errors returned wrap them
// with what failed and on what.
var (
	// ErrNoPools says no enabled pool qualifies for the request (none
	// exists, none selects the node, or none allows the intended use).
	ErrNoPools = errors.New("no IP pool qualifies")
	// ErrPoolNotUsable says a requested pool does not exist or is disabled.
	ErrPoolNotUsable = errors.New("pool does not exist or is disabled")
	// ErrExhausted says fewer addresses than requested could be assigned.
	ErrExhausted = errors.New("not enough free addresses")
	// ErrAlreadyAssigned says a specific address is already allocated.
	ErrAlreadyAssigned = errors.New("address already assigned")
	// ErrNotAssigned says an address is not allocated.
	ErrNotAssigned = errors.New("address not assigned")
	// ErrCoolingDown: the address was released and waits out the
	// IPAMConfiguration ipCooldownSeconds; it comes with ErrNotAssigned.
	ErrCoolingDown = errors.New("cooling down after its release")
	// ErrNotInPool says an address lies in no configured pool.
	ErrNotInPool = errors.New("address is not in a configured pool")
	// ErrTooManyRetries says compare-and-swap kept failing under
	// contention.
	ErrTooManyRetries = errors.New("too many concurrent updates, gave up")
	// ErrInvalid says an argument is malformed.
	ErrInvalid = errors.New("invalid argument")
)
