package felix

import (
	"context"
	"fmt"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	bpfdp "github.com/palisade-net/palisade/felix/dataplane/bpf"
)

// Inspector lets other goroutines ask a running felix about its state:
// an explanation of a packet from its live calculation graph, with its
// dataplane's counters of the rules named, and the counters of every
// rule. The caller makes it and hands it to Run (Config.Inspector); it
// implements calc.CounterSource.
type Inspector struct {
	reqs chan func(*calc.Graph, *dataplaneSwitch)
}

// NewInspector makes an Inspector for one felix.
func NewInspector() *Inspector {
	return &Inspector{reqs: make(chan func(*calc.Graph, *dataplaneSwitch))}
}

// counterReader reads the per-rule counters a dataplane indexed on
// felix's main loop (dataplane.CounterIndex, bpf.CounterIndex).
type counterReader interface {
	Read(ctx context.Context) ([]calc.RuleCounter, error)
}

// counterIndex indexes the counters of the rules keep accepts (every one
// when nil) in the dataplane that runs: the iptables driver once it knows
// its backend, or the eBPF driver. It is nil before the dataplane
// started.
func counterIndex(s *dataplaneSwitch, keep func(calc.RuleRef) bool) (counterReader, error) {
	switch d := s.d.(type) {
	case *dataplane.Driver:
		if d.Backend() != "" {
			return d.CounterIndex(keep), nil
		}
	case *bpfdp.Driver:
		x, err := d.CounterIndex(keep)
		if err != nil {
			return nil, err
		}
		return x, nil
	}
	return nil, nil
}

// do runs fn on felix's main loop, between two batches of work.
func (in *Inspector) do(ctx context.Context, fn func(*calc.Graph, *dataplaneSwitch)) error {
	done := make(chan struct{})
	select {
	case in.reqs <- func(g *calc.Graph, s *dataplaneSwitch) { fn(g, s); close(done) }:
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
	var idx counterReader
	var node string
	if derr := in.do(ctx, func(g *calc.Graph, s *dataplaneSwitch) {
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
		if len(refs) == 0 {
			return
		}
		var cerr error
		if idx, cerr = counterIndex(s, func(r calc.RuleRef) bool { return refs[r] }); cerr != nil {
			x.Notes = append(x.Notes, "no rule counters on "+node+": "+cerr.Error())
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
// policy and profile rule felix has written, on either dataplane.
func (in *Inspector) RuleCounters(ctx context.Context) ([]calc.RuleCounter, error) {
	var idx counterReader
	var cerr error
	if err := in.do(ctx, func(_ *calc.Graph, s *dataplaneSwitch) {
		idx, cerr = counterIndex(s, nil)
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
