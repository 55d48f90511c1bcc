package felix

import (
	"context"
	"fmt"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
)

// Inspector lets other goroutines ask a running felix about its state:
// an explanation of a packet from its live calculation graph, with its
// dataplane's counters of the rules named, and the counters of every
// rule. The caller makes it and hands it to Run (Config.Inspector); it
// implements calc.CounterSource.
type Inspector struct {
	reqs chan func(*calc.Graph, *selector)
}

// NewInspector makes an Inspector for one felix.
func NewInspector() *Inspector {
	return &Inspector{reqs: make(chan func(*calc.Graph, *selector))}
}

// ErrNoBPFCounters says the node runs the eBPF dataplane, whose per-rule
// counters are not read: its counters are kept by an interface's stage
// and a slot of the program, and a slot's count stays when a changed
// policy gives the interface a new program, so the sums would name the
// wrong rules.
var ErrNoBPFCounters = fmt.Errorf("%w: the eBPF dataplane's per-rule counters are not read by Palisade yet (they are kept by program slot and survive policy changes); per-rule counters need the iptables dataplane", calc.ErrNoCounters)

// counters is the iptables driver when it runs and knows its backend:
// the dataplane whose per-rule counters are read. It is nil with
// ErrNoBPFCounters on the eBPF dataplane, and nil before the dataplane
// started.
func counters(s *selector) (*dataplane.Driver, error) {
	switch d := s.d.(type) {
	case *dataplane.Driver:
		if d.Backend() != "" {
			return d, nil
		}
	case nil:
	default:
		return nil, ErrNoBPFCounters
	}
	return nil, nil
}

// do runs fn on felix's main loop, between two batches of work.
func (in *Inspector) do(ctx context.Context, fn func(*calc.Graph, *selector)) error {
	done := make(chan struct{})
	select {
	case in.reqs <- func(g *calc.Graph, s *selector) { fn(g, s); close(done) }:
	case <-ctx.Done():
		return fmt.Errorf("felix did not take the request: %w", ctx.Err())
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("felix did not answer: %w", ctx.Err())
	}
}

// Explain explains q from the live graph and adds, to the sides of this
// node, the dataplane's counters of each rule tried. Errors in q wrap
// calc.ErrBadQuery.
func (in *Inspector) Explain(ctx context.Context, q calc.Query) (*calc.Explanation, error) {
	var x *calc.Explanation
	var err error
	var idx *dataplane.CounterIndex
	var node string
	if derr := in.do(ctx, func(g *calc.Graph, s *selector) {
		node = g.Hostname()
		if x, err = g.Explain(q); err != nil {
			return
		}
		if !s.InSync() {
			x.Notes = append(x.Notes, "felix on "+node+" has not read the whole datastore yet: this is its view so far")
		}
		refs := map[calc.RuleRef]bool{}
		for _, s := range x.Sides {
			if s.Node == node {
				eachRule(&s, func(ref calc.RuleRef, _ *calc.RuleResult) { refs[ref] = true })
			}
		}
		d, cerr := counters(s)
		switch {
		case cerr != nil && len(refs) > 0:
			x.Notes = append(x.Notes, "no rule counters on "+node+": "+cerr.Error())
		case d != nil && len(refs) > 0:
			idx = d.CounterIndex(func(r calc.RuleRef) bool { return refs[r] })
		}
	}); derr != nil {
		return nil, derr
	}
	if err != nil || idx == nil {
		return x, err
	}
	cs, err := idx.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading rule counters: %w", err)
	}
	byRef := map[calc.RuleRef]calc.RuleCounter{}
	for _, c := range cs {
		byRef[c.RuleRef] = c
	}
	for i := range x.Sides {
		if x.Sides[i].Node != node {
			continue
		}
		eachRule(&x.Sides[i], func(ref calc.RuleRef, r *calc.RuleResult) {
			if c, ok := byRef[ref]; ok {
				p, b := c.Packets, c.Bytes
				r.Packets, r.Bytes = &p, &b
			}
		})
	}
	return x, nil
}

// eachRule calls fn for every rule tried in a side, with its reference.
func eachRule(s *calc.Side, fn func(calc.RuleRef, *calc.RuleResult)) {
	for _, st := range s.Stages {
		if st.Chain == nil {
			continue
		}
		visit := func(p *calc.PolicyResult) {
			for i := range p.Rules {
				fn(calc.RuleRef{Kind: p.Kind, Tier: p.Tier, Namespace: p.Namespace, Name: p.Name, Direction: s.Direction, Index: p.Rules[i].Index}, &p.Rules[i])
			}
		}
		for ti := range st.Chain.Tiers {
			for pi := range st.Chain.Tiers[ti].Policies {
				visit(&st.Chain.Tiers[ti].Policies[pi])
			}
		}
		for pi := range st.Chain.Profiles {
			visit(&st.Chain.Profiles[pi])
		}
	}
}

// RuleCounters implements calc.CounterSource: the counters of every
// policy and profile rule felix has written. On the eBPF dataplane it
// fails with ErrNoBPFCounters.
func (in *Inspector) RuleCounters(ctx context.Context) ([]calc.RuleCounter, error) {
	var idx *dataplane.CounterIndex
	var cerr error
	if err := in.do(ctx, func(_ *calc.Graph, s *selector) {
		var d *dataplane.Driver
		if d, cerr = counters(s); d != nil {
			idx = d.CounterIndex(nil)
		}
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	if idx == nil {
		return []calc.RuleCounter{}, nil
	}
	return idx.Read(ctx)
}
