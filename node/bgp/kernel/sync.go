package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Stats counts what a sync or update did.
type Stats struct {
	Read, Added, Replaced, Deleted int
	// Conflicts are routes another protocol already holds; left alone.
	Conflicts int
	Errors    []error
}

// key is a destination in a compact, pointer-free form: hashed and
// compared as plain bytes, and never scanned by the garbage collector
// (netip.Prefix holds a pointer and hashes field by field).
type key struct {
	addr [16]byte
	bits uint8
	v4   bool
}

func keyOf(p netip.Prefix) key {
	return key{addr: p.Addr().As16(), bits: uint8(p.Bits()), v4: p.Addr().Is4()}
}

// entry is one destination: the route we want there, and the route of ours
// the kernel holds there (as last read back or written).
type entry struct {
	want    Route
	wanted  bool
	have    Route
	written bool
	// seen is the resync generation that last found the route in the
	// kernel.
	seen uint32
}

// Syncer keeps the kernel's routes of our protocol equal to a desired set:
// Update applies each change at once (against what it last wrote), Resync
// reads the kernel back, diffs and repairs. Safe for concurrent use.
type Syncer struct {
	h   *Handle
	log *log.Entry

	mu     sync.Mutex
	routes map[key]*entry
	// wanted counts the entries with wanted set.
	wanted int
	gen    uint32
}

// NewSyncer returns a Syncer writing through h.
func NewSyncer(h *Handle, logger *log.Entry) *Syncer {
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	return &Syncer{h: h, log: logger, routes: map[key]*entry{}}
}

// Update sets routes (a route with neither next hops nor the blackhole flag
// is removed) and applies the change.
func (s *Syncer) Update(routes []Route) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []Op
	for _, r := range routes {
		r = r.Normalize()
		k := keyOf(r.Dst)
		e := s.routes[k]
		if !r.Blackhole && len(r.NextHops) == 0 {
			if e == nil {
				continue
			}
			if e.wanted {
				e.wanted, e.want = false, Route{}
				s.wanted--
			}
			if e.written {
				ops = append(ops, Op{Route: e.have, Delete: true})
			} else {
				delete(s.routes, k)
			}
			continue
		}
		if e == nil {
			e = &entry{}
			s.routes[k] = e
		}
		if !e.wanted {
			s.wanted++
		}
		e.want, e.wanted = r, true
		switch {
		case !e.written:
			ops = append(ops, Op{Route: r})
		case !e.have.Equal(r):
			ops = append(ops, Op{Route: r, Replace: true})
		}
	}
	return s.apply(ops, 0)
}

// Programmed counts the desired routes, and those of them the kernel
// holds as desired (written, or read back, with the wanted next hops).
func (s *Syncer) Programmed() (wanted, programmed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.routes {
		if e.wanted && e.written && e.have.Equal(e.want) {
			programmed++
		}
	}
	return s.wanted, programmed
}

// Desired returns a copy of the desired routes.
func (s *Syncer) Desired() map[netip.Prefix]Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[netip.Prefix]Route, s.wanted)
	for _, e := range s.routes {
		if e.wanted {
			out[e.want.Dst] = e.want
		}
	}
	return out
}

// Resync reads back our routes, diffs them against the desired set and
// repairs the difference; stale routes (ours, not desired) are removed only
// when removeStale is set: until the speaker has converged, a route left by
// a previous run may still be right. The kernel's dump is compared route
// by route as it is read, with no list built first.
func (s *Syncer) Resync(removeStale bool) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	gen := s.gen
	var ops []Op
	read, seen := 0, 0
	err := s.h.Walk(func(r Route) {
		read++
		k := keyOf(r.Dst)
		e := s.routes[k]
		if e == nil {
			// Ours but unknown: left by a previous run or added by hand.
			e = &entry{}
			s.routes[k] = e
		}
		if e.seen != gen {
			seen++
		}
		e.seen = gen
		if !e.written || !e.have.Equal(r) {
			r.NextHops = slices.Clone(r.NextHops)
			e.have, e.written = r, true
		}
		switch {
		case e.wanted:
			if !e.want.Equal(e.have) {
				ops = append(ops, Op{Route: e.want, Replace: true})
			}
		case removeStale:
			ops = append(ops, Op{Route: e.have, Delete: true})
		}
	})
	if err != nil {
		return Stats{}, err
	}
	// What the dump did not show is not in the kernel (any more).
	if seen < len(s.routes) {
		for k, e := range s.routes {
			if e.seen == gen {
				continue
			}
			e.have, e.written = Route{}, false
			if e.wanted {
				ops = append(ops, Op{Route: e.want})
			} else {
				delete(s.routes, k)
			}
		}
	}
	return s.apply(ops, read), nil
}

// apply runs ops and keeps the entries' kernel side in step.
func (s *Syncer) apply(ops []Op, read int) Stats {
	st := Stats{Read: read}
	if len(ops) == 0 {
		return st
	}
	var failed map[netip.Prefix]error
	for _, e := range s.h.Apply(ops) {
		if failed == nil {
			failed = map[netip.Prefix]error{}
		}
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
		k := keyOf(op.Route.Dst)
		e := s.routes[k]
		switch {
		case op.Delete:
			st.Deleted++
			if e != nil {
				e.have, e.written = Route{}, false
				if !e.wanted {
					delete(s.routes, k)
				}
			}
		default:
			if op.Replace {
				st.Replaced++
			} else {
				st.Added++
			}
			if e != nil {
				e.have, e.written = op.Route, true
			}
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
