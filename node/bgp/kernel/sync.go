package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Diff returns the ops that turn current (routes of our protocol read back
// from the kernel) into desired. Routes in current but not desired are
// deleted only when removeStale is set: until the speaker has converged a
// route left by a previous run may still be right.
func Diff(current, desired map[netip.Prefix]Route, removeStale bool) []Op {
	var ops []Op
	for dst, want := range desired {
		have, ok := current[dst]
		switch {
		case !ok:
			ops = append(ops, Op{Route: want})
		case !have.Equal(want):
			ops = append(ops, Op{Route: want, Replace: true})
		}
	}
	if removeStale {
		for dst, have := range current {
			if _, ok := desired[dst]; !ok {
				ops = append(ops, Op{Route: have, Delete: true})
			}
		}
	}
	return ops
}

// Stats counts what a sync or update did.
type Stats struct {
	Read, Added, Replaced, Deleted int
	// Conflicts are routes another protocol already holds; left alone.
	Conflicts int
	Errors    []error
}

// Syncer keeps the kernel's routes of our protocol equal to a desired set:
// Set and Delete apply each change at once (against what it last wrote),
// Resync reads the kernel back, diffs and repairs. Safe for concurrent use.
type Syncer struct {
	h   *Handle
	log *log.Entry

	mu      sync.Mutex
	desired map[netip.Prefix]Route
	// written is what we believe the kernel holds of ours.
	written map[netip.Prefix]Route
}

// NewSyncer returns a Syncer writing through h.
func NewSyncer(h *Handle, logger *log.Entry) *Syncer {
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	return &Syncer{h: h, log: logger, desired: map[netip.Prefix]Route{}, written: map[netip.Prefix]Route{}}
}

// Update sets routes (a route with neither next hops nor the blackhole flag
// is removed) and applies the change.
func (s *Syncer) Update(routes []Route) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []Op
	for _, r := range routes {
		r = r.Normalize()
		if !r.Blackhole && len(r.NextHops) == 0 {
			delete(s.desired, r.Dst)
			if have, ok := s.written[r.Dst]; ok {
				ops = append(ops, Op{Route: have, Delete: true})
			}
			continue
		}
		s.desired[r.Dst] = r
		have, ok := s.written[r.Dst]
		switch {
		case !ok:
			ops = append(ops, Op{Route: r})
		case !have.Equal(r):
			ops = append(ops, Op{Route: r, Replace: true})
		}
	}
	return s.apply(ops, 0)
}

// Desired returns a copy of the desired routes.
func (s *Syncer) Desired() map[netip.Prefix]Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[netip.Prefix]Route, len(s.desired))
	for k, v := range s.desired {
		out[k] = v
	}
	return out
}

// Resync reads back our routes, diffs them against the desired set and
// repairs the difference; stale routes (ours, not desired) are removed only
// when removeStale is set.
func (s *Syncer) Resync(removeStale bool) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	current, err := s.h.list(len(s.desired) + len(s.desired)/8)
	if err != nil {
		return Stats{}, err
	}
	s.written = current
	st := s.apply(Diff(current, s.desired, removeStale), len(current))
	return st, nil
}

// apply runs ops and keeps written in step.
func (s *Syncer) apply(ops []Op, read int) Stats {
	st := Stats{Read: read}
	if len(ops) == 0 {
		return st
	}
	failed := map[netip.Prefix]error{}
	for _, e := range s.h.Apply(ops) {
		failed[e.Op.Route.Dst] = e.Err
		switch {
		case !e.Op.Delete && !e.Op.Replace && errors.Is(e.Err, unix.EEXIST):
			st.Conflicts++
			s.log.WithField("route", e.Op.Route.Dst).Warn("Route slot held by another protocol; not touching it")
		case e.Op.Delete && errors.Is(e.Err, unix.ESRCH):
			failed[e.Op.Route.Dst] = nil // already gone
		default:
			st.Errors = append(st.Errors, e)
		}
	}
	for _, op := range ops {
		if err, bad := failed[op.Route.Dst]; bad && err != nil {
			continue
		}
		switch {
		case op.Delete:
			st.Deleted++
			delete(s.written, op.Route.Dst)
		case op.Replace:
			st.Replaced++
			s.written[op.Route.Dst] = op.Route
		default:
			st.Added++
			s.written[op.Route.Dst] = op.Route
		}
	}
	if len(st.Errors) > 0 {
		s.log.WithField("errors", len(st.Errors)).WithError(st.Errors[0]).Warn("Some route changes failed")
	}
	return st
}

// String summarises stats for logs.
func (st Stats) String() string {
	return fmt.Sprintf("read %d, added %d, replaced %d, deleted %d, conflicts %d, errors %d",
		st.Read, st.Added, st.Replaced, st.Deleted, st.Conflicts, len(st.Errors))
}
