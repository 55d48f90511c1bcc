package felix

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
)

// TestInspectorCounters runs felix with an Inspector on the iptables and
// the eBPF dataplane: on iptables the rule that allowed a probe counts it
// in RuleCounters and in the explanation; on eBPF, whose counters are not
// read, RuleCounters fails with calc.ErrNoCounters and the explanation
// says why it has no counters, instead of giving numbers of no rule.
func TestInspectorCounters(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newClusterNoFelix(t, dp, false)
			in := NewInspector()
			cfg := c.felixConfigOf()
			cfg.Inspector = in
			runFelix(t, c.ctx, c.cancel, cfg)
			c.addPod("ns-a", "web", "10.65.0.1", map[string]string{"app": "web"}, "sa-w")
			c.addPod("ns-a", "client", "10.65.0.2", map[string]string{"app": "client"}, "sa-x")
			rs := c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: ns-a}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}]
`)
			c.waitPolicies(rs, true)
			c.expect(probe{from: "client", to: "web", proto: "tcp", port: 8080, allowed: true},
				probe{from: "client", to: "web", proto: "tcp", port: 8081})
			ref := calc.RuleRef{Kind: "NetworkPolicy", Tier: "default", Namespace: "ns-a", Name: "web", Direction: "ingress", Index: 0}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			q := calc.Query{From: calc.End{Namespace: "ns-a", Name: "client"}, To: calc.End{Namespace: "ns-a", Name: "web"}, Protocol: 6, SrcPort: 40000, DstPort: 8080}
			x, err := in.Explain(ctx, q)
			if err != nil || x.Verdict != calc.VerdictAllow || x.Sides[1].Decider.Rule == nil || *x.Sides[1].Decider.Rule != ref {
				t.Fatalf("explain: %v %+v", err, x)
			}
			var counted *uint64
			eachRule(&x.Sides[1], func(r calc.RuleRef, res *calc.RuleResult) {
				if r == ref {
					counted = res.Packets
				}
			})
			cs, err := in.RuleCounters(ctx)
			noCounters := slices.ContainsFunc(x.Notes, func(n string) bool { return strings.Contains(n, ErrNoBPFCounters.Error()) })
			if dp == "BPF" {
				if !errors.Is(err, calc.ErrNoCounters) || !noCounters || counted != nil {
					t.Fatalf("eBPF: RuleCounters %v (want ErrNoCounters), explanation notes %q, rule counter %v (want none)", err, x.Notes, counted)
				}
				return
			}
			if err != nil || noCounters || counted == nil || *counted == 0 {
				t.Fatalf("iptables: RuleCounters %v, notes %q, counter in the explanation %v (want > 0)", err, x.Notes, counted)
			}
			i := slices.IndexFunc(cs, func(c calc.RuleCounter) bool { return c.RuleRef == ref })
			if i < 0 || cs[i].Packets == 0 || cs[i].Action != calc.Allow {
				t.Fatalf("iptables: no counted Allow rule %v in %+v", ref, cs)
			}
		})
	}
}
