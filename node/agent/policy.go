package agent

import (
	"context"
	"fmt"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// livePolicy answers the status socket's policy endpoints from the
// running felix: explanations from its live graph (with the nodes'
// addresses read from the datastore, so a node's own address is known as
// its host) and its dataplane's rule counters.
type livePolicy struct {
	inspector *felix.Inspector
	store     datastore.Interface
}

func (p livePolicy) Explain(ctx context.Context, q calc.Query) (*calc.Explanation, error) {
	nodes, _, err := p.store.List(ctx, datastore.ListOptions{Kind: v3.KindNode})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	q.Hosts = calc.HostAddresses(nodes, q.Hosts)
	return p.inspector.Explain(ctx, q)
}

func (p livePolicy) RuleCounters(ctx context.Context) ([]calc.RuleCounter, error) {
	return p.inspector.RuleCounters(ctx)
}
