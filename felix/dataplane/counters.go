package dataplane

import (
	"context"
	"errors"
	"slices"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/rules"
)

// CounterIndex says which kernel rules count for which policy and profile
// rules, as the driver last rendered them: made on the driver's goroutine
// (CounterIndex), read from any (Read).
type CounterIndex struct {
	run     *nsexec.Runner
	backend iptables.Backend
	// rules per family and table.
	rules map[int]map[string][]indexedRule
}

type indexedRule struct {
	key    iptables.RuleKey
	ref    calc.RuleRef
	action calc.Action
}

// CounterIndex indexes the rules of the policies and profiles keep
// accepts (every one when keep is nil). Call it where Apply is called.
func (d *Driver) CounterIndex(keep func(calc.RuleRef) bool) *CounterIndex {
	idx := &CounterIndex{run: d.run, backend: d.backend, rules: map[int]map[string][]indexedRule{}}
	add := func(family int, chains map[string][]rules.Chain, ref calc.RuleRef, in, out []calc.Rule, inChain, outChain string) {
		for table, cs := range chains {
			for _, c := range cs {
				src := out
				ref.Direction = "egress"
				if c.Name == inChain {
					ref.Direction, src = "ingress", in
				} else if c.Name != outChain {
					continue
				}
				for _, r := range c.Rules {
					if r.Origin == 0 {
						continue
					}
					ref.Index = r.Origin - 1
					if keep != nil && !keep(ref) {
						continue
					}
					action := calc.Action("")
					if i := slices.IndexFunc(src, func(cr calc.Rule) bool { return cr.Index == ref.Index }); i >= 0 {
						action = src[i].Action
					}
					if idx.rules[family] == nil {
						idx.rules[family] = map[string][]indexedRule{}
					}
					idx.rules[family][table] = append(idx.rules[family][table], indexedRule{iptables.RuleKey{Chain: c.Name, Hash: r.Hash}, ref, action})
				}
			}
		}
	}
	for _, f := range d.families {
		for id, ir := range f.render.policies {
			kind := calc.KindNameNetworkPolicy
			if id.Namespace == "" {
				kind = calc.KindNameGlobalNetworkPolicy
			}
			ref := calc.RuleRef{Kind: kind, Tier: id.Tier, Namespace: id.Namespace, Name: id.Name}
			add(f.version, ir.chains, ref, ir.item.Inbound, ir.item.Outbound, rules.PolicyChain(id, true), rules.PolicyChain(id, false))
		}
		for name, ir := range f.render.profiles {
			ref := calc.RuleRef{Kind: calc.KindNameProfile, Name: name}
			add(f.version, ir.chains, ref, ir.item.Inbound, ir.item.Outbound, rules.ProfileChain(name, true), rules.ProfileChain(name, false))
		}
	}
	return idx
}

// maxChainReads is the most chains whose counters are read one by one;
// more, and the whole table is read at once.
const maxChainReads = 64

// Read reads the kernel's counters of the indexed rules: chain by chain
// for a few chains (an explanation's), or one iptables-save -c per table. The counters of a rule's
// kernel rules (one per family, or several for several nets or ports) are
// added up.
func (x *CounterIndex) Read(ctx context.Context) ([]calc.RuleCounter, error) {
	sums := map[calc.RuleRef]*calc.RuleCounter{}
	var errs []error
	for family, tables := range x.rules {
		for table, rs := range tables {
			var chains []string
			for _, r := range rs {
				if !slices.Contains(chains, r.key.Chain) {
					chains = append(chains, r.key.Chain)
				}
			}
			var cs map[iptables.RuleKey]iptables.Counter
			var err error
			if len(chains) <= maxChainReads {
				cs, err = iptables.ReadChainCounters(ctx, x.run, x.backend, family, table, chains)
			} else {
				cs, err = iptables.ReadCounters(ctx, x.run, x.backend, family, table)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, r := range rs {
				s := sums[r.ref]
				if s == nil {
					s = &calc.RuleCounter{RuleRef: r.ref, Action: r.action}
					sums[r.ref] = s
				}
				c := cs[r.key]
				s.Packets += c.Packets
				s.Bytes += c.Bytes
			}
		}
	}
	return SortedCounters(sums), errors.Join(errs...)
}

// SortedCounters lists the sums of a dataplane's counters in
// calc.SortRuleCounters order.
func SortedCounters(sums map[calc.RuleRef]*calc.RuleCounter) []calc.RuleCounter {
	out := make([]calc.RuleCounter, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	calc.SortRuleCounters(out)
	return out
}
