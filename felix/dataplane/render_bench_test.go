package dataplane

import (
	"fmt"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// BenchmarkRenderOnePolicyChange renders, on a node with 1,000 endpoints
// of ten policies each, the change of one policy: what every policy update
// costs before iptables-restore runs.
func BenchmarkRenderOnePolicyChange(b *testing.B) {
	w := &world{cfg: calc.MergeConfig(nil, nil), pols: map[calc.PolicyID]*calc.Policy{}, profs: map[string]*calc.Profile{}, eps: map[calc.EndpointID]*calc.Endpoint{}}
	w.profs["kns.a"] = &calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}}
	for i := range 1000 {
		w.setPolicy(fmt.Sprint("p", i), uint16(1000+i), func(*calc.Policy) {})
	}
	for i := range 1000 {
		var pols []string
		for k := range 10 {
			pols = append(pols, fmt.Sprint("p", (i+k*100)%1000))
		}
		w.setWorkload(i, pols)
	}
	r := newRenderer(4)
	r.render(w.cfg, w.pols, w.profs, w.eps)
	b.ResetTimer()
	for i := range b.N {
		w.setPolicy("p0", uint16(2000+i%2), func(*calc.Policy) {})
		rs := r.render(w.cfg, w.pols, w.profs, w.eps)
		if len(rs.Tables["filter"]) < 3000 {
			b.Fatalf("%d filter chains, want more than 3,000", len(rs.Tables["filter"]))
		}
	}
}

// BenchmarkRenderNewEndpoint renders, on a node with 1,000 endpoints, the
// arrival and departure of one more: its chains and the dispatch.
func BenchmarkRenderNewEndpoint(b *testing.B) {
	w := &world{cfg: calc.MergeConfig(nil, nil), pols: map[calc.PolicyID]*calc.Policy{}, profs: map[string]*calc.Profile{}, eps: map[calc.EndpointID]*calc.Endpoint{}}
	w.profs["kns.a"] = &calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}}
	for i := range 100 {
		w.setPolicy(fmt.Sprint("p", i), uint16(1000+i), func(*calc.Policy) {})
	}
	pols := func(i int) []string {
		var out []string
		for k := range 10 {
			out = append(out, fmt.Sprint("p", (i+k*10)%100))
		}
		return out
	}
	for i := range 1000 {
		w.setWorkload(i, pols(i))
	}
	r := newRenderer(4)
	r.render(w.cfg, w.pols, w.profs, w.eps)
	extra := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w1000"}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			w.setWorkload(1000, pols(1000))
		} else {
			delete(w.eps, extra)
		}
		r.render(w.cfg, w.pols, w.profs, w.eps)
	}
}
