package bpf

import (
	"context"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// CounterIndex says which counters of pal_counters belong to which policy
// and profile rules, as the driver last wrote the interfaces' entries:
// made on the driver's goroutine (Driver.CounterIndex), read from any
// (Read). A counter's key is (interface, stage, rule id), and a rule id
// names one rule as it is written (policy.RuleID), so a key that no
// current program holds is never read as another rule's.
type CounterIndex struct {
	m     *ebpf.Map // a handle of the index's own, closed by Read
	rules map[inspect.CounterKey]indexedRule
	// all are the indexed rules, counted or not.
	all map[calc.RuleRef]calc.Action
}

type indexedRule struct {
	ref    calc.RuleRef
	action calc.Action
}

// Direction is the policy direction of a stage of an endpoint: packets
// arriving on a workload interface are its egress, on a host endpoint
// its ingress.
func Direction(epFlags uint32, stage int) string {
	in := stage <= palbpf.StageForwardIn
	if epFlags&palbpf.EndpointWorkload != 0 {
		in = !in
	}
	if in {
		return "ingress"
	}
	return "egress"
}

// RuleRefOf is the policy or profile rule a program's slot counts for;
// false for an implicit end (end of tier, no profile allowed, no
// decision).
func RuleRefOf(s policy.Slot, direction string) (calc.RuleRef, bool) {
	if s.Rule < 0 {
		return calc.RuleRef{}, false
	}
	switch {
	case s.Profile != "":
		return calc.RuleRef{Kind: calc.KindNameProfile, Name: s.Profile, Direction: direction, Index: s.Index}, true
	case s.Policy != "":
		kind := calc.KindNameGlobalNetworkPolicy
		if s.Namespace != "" {
			kind = calc.KindNameNetworkPolicy
		}
		return calc.RuleRef{Kind: kind, Tier: s.Tier, Namespace: s.Namespace, Name: s.Name, Direction: direction, Index: s.Index}, true
	}
	return calc.RuleRef{}, false
}

// liveCounters are the keys of every slot of the programs the interfaces'
// entries name, with the slot; fn sees each.
func (d *Driver) liveCounters(fn func(k inspect.CounterKey, flags uint32, s policy.Slot)) {
	if d.ifaces == nil || d.progs == nil {
		return
	}
	for idx, ep := range d.ifaces.eps {
		for stage, slot := range ep.Slots {
			p := d.progs.bySlot[slot]
			if slot == 0 || p == nil {
				continue
			}
			for _, s := range p.desc.Slots {
				fn(inspect.CounterKey{Ifindex: int(idx), Stage: stage, Rule: s.ID}, ep.Flags, s)
			}
		}
	}
}

// CounterIndex indexes the rules of the policies and profiles keep
// accepts (every one when keep is nil) on every interface. Call it where
// Apply is called.
func (d *Driver) CounterIndex(keep func(calc.RuleRef) bool) (*CounterIndex, error) {
	x := &CounterIndex{rules: map[inspect.CounterKey]indexedRule{}, all: map[calc.RuleRef]calc.Action{}}
	d.liveCounters(func(k inspect.CounterKey, flags uint32, s policy.Slot) {
		ref, ok := RuleRefOf(s, Direction(flags, k.Stage))
		if !ok || keep != nil && !keep(ref) {
			return
		}
		x.rules[k] = indexedRule{ref, calc.Action(s.Action)}
		x.all[ref] = calc.Action(s.Action)
	})
	if len(x.rules) == 0 {
		return x, nil
	}
	m, err := d.objs.Maps[palbpf.MapCounters].Clone()
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", palbpf.MapCounters, err)
	}
	x.m = m
	return x, nil
}

// Read reads the counters of the indexed rules, summed over the CPUs and
// over the interfaces and stages where a rule is written.
func (x *CounterIndex) Read(ctx context.Context) ([]calc.RuleCounter, error) {
	sums := map[calc.RuleRef]*calc.RuleCounter{}
	for ref, a := range x.all {
		sums[ref] = &calc.RuleCounter{RuleRef: ref, Action: a}
	}
	var err error
	if x.m != nil {
		defer x.m.Close()
		var cs []inspect.Counter
		cs, err = inspect.ReadCounters(x.m)
		for _, c := range cs {
			if r, ok := x.rules[c.Key()]; ok {
				s := sums[r.ref]
				s.Packets += c.Packets
				s.Bytes += c.Bytes
			}
		}
	}
	return dataplane.SortedCounters(sums), err
}

// collectCounters deletes the rule counters no program of an interface's
// stage holds any more (a rule changed, a policy went): their keys are
// never read, and a rule written again from nothing starts from zero.
func (d *Driver) collectCounters() error {
	live := map[inspect.CounterKey]bool{}
	d.liveCounters(func(k inspect.CounterKey, _ uint32, _ policy.Slot) { live[k] = true })
	m := d.objs.Maps[palbpf.MapCounters]
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	b := &d.sweeps
	stale := b.cstale[:0]
	var errs []error
	if err := b.counters.walk(m, cpus, func(keys []palbpf.CounterKey, _ []palbpf.CounterValue) {
		for _, k := range keys {
			if k.Stage != palbpf.StageGeneral && !live[inspect.CounterKey{Ifindex: int(k.Ifindex), Stage: int(k.Stage), Rule: k.Rule}] {
				stale = append(stale, k)
			}
		}
	}); err != nil {
		errs = append(errs, fmt.Errorf("reading %s: %w", palbpf.MapCounters, err))
	}
	b.cstale = reuse(stale)
	if _, err := deleteAll(m, stale); err != nil {
		errs = append(errs, fmt.Errorf("deleting stale rule counters: %w", err))
	}
	return errors.Join(errs...)
}
