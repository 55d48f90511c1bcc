package bench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/felix/rules"
)

// bigRuleset renders about n filter rules: endpoints each selected by
// policies of ten port rules.
func bigRuleset(n int) *rules.Ruleset {
	cfg := calc.MergeConfig(nil, nil)
	in := rules.Input{Config: cfg, IPVersion: 4, Policies: map[calc.PolicyID]*calc.Policy{},
		Profiles: map[string]*calc.Profile{}, Endpoints: map[calc.EndpointID]*calc.Endpoint{}}
	// Each policy: 10 allow rules → 20 iptables rules (mark, return);
	// each endpoint's two chains and its dispatch entries add about 14.
	policies := n / 34
	for i := range policies {
		id := calc.PolicyID{Tier: "default", Name: fmt.Sprintf("p%d", i)}
		p := &calc.Policy{ID: id, Ingress: true}
		for r := range 10 {
			port := uint16(1000 + i*10 + r)
			p.Inbound = append(p.Inbound, calc.Rule{Action: calc.Allow, Protocol: 6,
				SrcNets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)}, SrcIPSets: setsFor(i),
				DstPorts: []calc.PortRange{{Min: port, Max: port}}})
		}
		in.Policies[id] = p
		eid := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: fmt.Sprintf("ep%d", i)}
		in.Endpoints[eid] = &calc.Endpoint{ID: eid, InterfaceName: fmt.Sprintf("cali%011d", i),
			Tiers: []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id}}}}
	}
	return rules.Render(in)
}

func countRules(rs *rules.Ruleset) int {
	n := 0
	for _, cs := range rs.Tables {
		for _, c := range cs {
			n += len(c.Rules)
		}
	}
	return n
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkProgram10kRules programs a ruleset of about 10,000 rules from
// scratch with the table drivers (one read back, diff, one restore per table)
// and compares it with a raw iptables-restore --noflush of the same text,
// each in a fresh namespace, alternating, on both backends.
func BenchmarkProgram10kRules(b *testing.B) {
	nstest.RequireRoot(b)
	rs := bigRuleset(10000)
	b.Logf("%d rules", countRules(rs))
	for _, backend := range []iptables.Backend{iptables.NFT, iptables.Legacy} {
		b.Run(string(backend), func(b *testing.B) {
			_, restore := backend.Commands(4)
			prefix := nstest.Prefix()
			var raw, ours []time.Duration
			for i := range 9 {
				for _, mode := range []string{"raw", "ours"} {
					ns := nstest.New(b, prefix, fmt.Sprintf("%s%d", mode, i))
					run, err := nsexec.New(ns.Path())
					if err != nil {
						b.Fatal(err)
					}
					ns.MustRun(b, "ipset", "create", "cali40masq-ipam-pools", "hash:net")
					ns.MustRun(b, "ipset", "create", "cali40all-ipam-pools", "hash:net")
					ctx := context.Background()
					start := time.Now()
					if mode == "raw" {
						for _, t := range rules.TableNames() {
							if _, err := run.Run(ctx, rs.Restore(t, true), restore, "--noflush"); err != nil {
								b.Fatal(err)
							}
						}
						raw = append(raw, time.Since(start))
					} else {
						// As the driver does: one read back of every
						// table, then one restore per table.
						sections, err := iptables.ReadAll(ctx, run, backend, 4)
						if err != nil {
							b.Fatal(err)
						}
						for _, t := range rules.TableNames() {
							tb := iptables.NewTable(t, 4, backend, run, log.NewEntry(log.StandardLogger()))
							tb.SetChains(rs.Tables[t])
							tb.SetJumps(rs.Jumps, iptables.Insert)
							tb.Load(sections[t])
							if _, err := tb.Apply(ctx); err != nil {
								b.Fatal(err)
							}
							tb.Close()
						}
						ours = append(ours, time.Since(start))
					}
					run.Close()
				}
			}
			r, o := median(raw), median(ours)
			b.ReportMetric(float64(o.Microseconds())/1000, "ms")
			b.ReportMetric(float64(r.Microseconds())/1000, "raw-ms")
			b.ReportMetric(float64(o)/float64(r), "x/ref")
		})
	}
}

var withSets = false

func setsFor(i int) []string {
	if !withSets {
		return nil
	}
	return []string{"s:x"}
}
