package calc

import (
	"cmp"
	"context"
	"errors"
	"slices"
)

// RuleCounter is what one rule of a policy or profile matched on a node,
// as the dataplane counts it: packets and bytes since the rule was
// written (a rewritten chain starts again from zero). A rule that needs
// several kernel rules (several nets, or numeric and named ports) counts
// a packet once for each of them it matches. The fields are flat so that
// each counter can be a metric with the RuleRef as labels.
type RuleCounter struct {
	RuleRef
	Action  Action `json:"action"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// ErrNoCounters says a dataplane has no per-rule counters to read.
var ErrNoCounters = errors.New("no per-rule counters")

// CounterSource is a dataplane that counts what each rule matched: the
// iptables dataplane from its rules' counters, a BPF one from its maps.
type CounterSource interface {
	RuleCounters(ctx context.Context) ([]RuleCounter, error)
}

// SortRuleCounters orders counters by kind, tier, namespace, name,
// direction and rule.
func SortRuleCounters(cs []RuleCounter) {
	slices.SortFunc(cs, func(a, b RuleCounter) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Index, b.Index))
	})
}
