package calc

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/golden"
)

func slice(ns, name, svc string, addrs []string, ports ...ServicePort) Update {
	s := &EndpointSlice{TypeMeta: v3.TypeMeta{Kind: KindEndpointSlice}, ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: name}, Service: svc, Ports: ports}
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, netip.MustParseAddr(a))
	}
	return Update{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: ns, Name: name}, Value: s}
}

func sliceGone(ns, name string) Update {
	return Update{Key: datastore.Key{Kind: KindEndpointSlice, Namespace: ns, Name: name}}
}

func slicesSynced() Update {
	return Update{Key: datastore.Key{Kind: KindEndpointSlicesSynced}, Value: &EndpointSlice{}}
}

// logDP is a recorder that also writes down every IP set call.
type logDP struct {
	*recorder
	log strings.Builder
}

func (d *logDP) OnIPSetUpdate(s *IPSet) {
	d.recorder.OnIPSetUpdate(s)
	fmt.Fprintf(&d.log, "set %s %s %v\n", s.ID, s.Type, slices.Sorted(slices.Values(s.Members)))
}

func (d *logDP) OnIPSetDelta(id string, added, removed []string) {
	d.recorder.OnIPSetDelta(id, added, removed)
	fmt.Fprintf(&d.log, "delta %s +%v -%v\n", id, slices.Sorted(slices.Values(added)), slices.Sorted(slices.Values(removed)))
}

func (d *logDP) OnIPSetRemoved(id string) {
	d.recorder.OnIPSetRemoved(id)
	fmt.Fprintf(&d.log, "removed %s\n", id)
}

func (d *logDP) OnPolicyUpdate(p *Policy) {
	d.recorder.OnPolicyUpdate(p)
	fmt.Fprintf(&d.log, "policy %s\n", p.ID)
	for _, dir := range []struct {
		name  string
		rules []Rule
	}{{"in", p.Inbound}, {"out", p.Outbound}} {
		for _, r := range dir.rules {
			fmt.Fprintf(&d.log, "  %s[%d] %s proto=%d src=%v dst=%v dstPorts=%v dstPortSets=%v\n", dir.name, r.Index, r.Action,
				r.Protocol, r.SrcIPSets, r.DstIPSets, r.DstPorts, r.DstNamedPortIPSets)
		}
	}
}

// TestServiceRules follows the IP sets and rules generated for rules
// naming a Service, against a golden file: before the EndpointSlices are
// read such a rule fails closed (an Allow is dropped, a Deny denies the
// rest); then a source Service is a hash:net set of its endpoints'
// addresses and a destination Service a hash:ip,port set of each address
// with its slice's ports; endpoints added to and removed from the slices
// (and a slice deleted) change the sets by deltas, the rules stay.
func TestServiceRules(t *testing.T) {
	dp := &logDP{recorder: newRecorder()}
	g := NewGraph(testNode, dp)
	tcp := numorstring.ProtocolFromString("TCP")
	step := func(name string, updates ...Update) {
		t.Helper()
		fmt.Fprintf(&dp.log, "== %s\n", name)
		g.OnUpdates(updates)
		g.OnInSync()
		g.Flush()
		if len(dp.errs) > 0 {
			t.Fatalf("dataplane order violations:\n%s", strings.Join(dp.errs, "\n"))
		}
	}
	pol := np("prod", "svc", "app == 'client'", nil,
		v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Services: &v3.ServiceMatch{Name: "web", Namespace: "front"}}})
	pol.Spec.Egress = []v3.Rule{
		{Action: v3.Deny, Protocol: &tcp, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "secret"}}},
		{Action: v3.Allow, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "db"}}},
	}
	pol.Spec.Types = []v3.PolicyType{v3.PolicyTypeIngress, v3.PolicyTypeEgress}
	step("before the slices are read",
		up(wep("prod", "client", testNode, "10.0.0.1", map[string]string{"app": "client"})),
		up(nsProfile("prod", nil)), up(pol),
		slice("prod", "db-1", "db", []string{"10.1.0.1", "10.1.0.2", "fd00::1"}, ServicePort{Proto: "tcp", Port: 5432}, ServicePort{Proto: "udp", Port: 53}),
		slice("prod", "db-2", "db", []string{"10.1.0.3"}, ServicePort{Proto: "tcp", Port: 5433}),
		slice("front", "web-1", "web", []string{"10.2.0.1"}, ServicePort{Proto: "tcp", Port: 80}),
		slice("prod", "secret-1", "secret", []string{"10.3.0.1"}, ServicePort{Proto: "tcp", Port: 22}),
		// A slice of another namespace's db is not prod/db's.
		slice("other", "db-1", "db", []string{"10.9.0.1"}, ServicePort{Proto: "tcp", Port: 5432}),
	)
	step("slices read", slicesSynced())
	step("endpoint removed, slice deleted, endpoint added",
		slice("prod", "db-1", "db", []string{"10.1.0.1", "fd00::1"}, ServicePort{Proto: "tcp", Port: 5432}, ServicePort{Proto: "udp", Port: 53}),
		sliceGone("prod", "db-2"),
		slice("front", "web-2", "web", []string{"10.2.0.2"}, ServicePort{Proto: "tcp", Port: 80}),
	)
	step("port changed", slice("prod", "secret-1", "secret", []string{"10.3.0.1"}, ServicePort{Proto: "tcp", Port: 2222}))
	step("last slice of a Service deleted", sliceGone("front", "web-1"), sliceGone("front", "web-2"))
	step("policy deleted", del(pol))
	golden.Check(t, filepath.Join("testdata", "services.golden"), dp.log.String(), *updateGolden)
}

// TestServiceRulesAnyOrder: the sets do not depend on whether the policy,
// the slices or the synced mark come first, nor on batching.
func TestServiceRulesAnyOrder(t *testing.T) {
	pol := gnp("g", "all()", nil, func(s *v3.GlobalNetworkPolicySpec) {
		s.Egress = []v3.Rule{{Action: v3.Allow, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "db", Namespace: "prod"}}}}
	})
	updates := []Update{
		up(wep("prod", "client", testNode, "10.0.0.1", nil)), up(pol),
		slice("prod", "db-1", "db", []string{"10.1.0.1"}, ServicePort{Proto: "tcp", Port: 5432}),
		slice("prod", "db-2", "db", []string{"10.1.0.2"}, ServicePort{Proto: "sctp", Port: 9}),
		slicesSynced(),
	}
	want := []string{"10.1.0.1,tcp:5432", "10.1.0.2,sctp:9"}
	for _, perm := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 0, 3, 1}, {4, 0, 1, 2, 3}} {
		var in []Update
		for _, i := range perm {
			in = append(in, updates[i])
		}
		for _, split := range []bool{false, true} {
			rec := newRecorder()
			g := NewGraph(testNode, rec)
			for i, u := range in {
				g.OnUpdate(u)
				if split && i%2 == 1 {
					g.OnInSync()
					g.Flush()
				}
			}
			g.OnInSync()
			g.Flush()
			p := rec.policies[PolicyID{Tier: "default", Name: "g"}]
			if p == nil || len(p.Outbound) != 1 || len(p.Outbound[0].DstNamedPortIPSets) != 1 {
				t.Fatalf("order %v split %v: policy %+v, want one rule with one ip,port set", perm, split, p)
			}
			id := p.Outbound[0].DstNamedPortIPSets[0]
			if got := members(t, rec, id); !slices.Equal(got, want) || rec.setTypes[id] != IPSetIPPort {
				t.Errorf("order %v split %v: set %s %s %v, want hash:ip,port %v", perm, split, id, rec.setTypes[id], got, want)
			}
		}
	}
}

// TestServiceRuleGaps: what stays fail-closed once the slices are read.
func TestServiceRuleGaps(t *testing.T) {
	tcp := numorstring.ProtocolFromString("TCP")
	c := newRuleCompiler()
	c.services = newServiceIndex()
	c.services.synced = true
	cases := []struct {
		name string
		rule v3.Rule
		ns   string
		gap  string
	}{
		{"no namespace in a global policy", v3.Rule{Action: v3.Allow, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "db"}}}, "", "destination.services"},
		{"destination ports beside a Service", v3.Rule{Action: v3.Allow, Protocol: &tcp,
			Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "db"}, Ports: []numorstring.Port{numorstring.SinglePort(1)}}}, "prod", "destination.ports (with services)"},
		{"enforced", v3.Rule{Action: v3.Allow, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "db"}}}, "prod", ""},
	}
	for _, tc := range cases {
		rules, _, notes := c.compile([]v3.Rule{tc.rule}, tc.ns, "egress")
		texts := gapTexts(notes)
		switch {
		case tc.gap == "" && (len(texts) > 0 || len(rules) != 1):
			t.Errorf("%s: notes %q rules %d, want one rule and no note", tc.name, texts, len(rules))
		case tc.gap != "" && (len(rules) != 0 || len(texts) != 1 || !strings.Contains(texts[0], tc.gap)):
			t.Errorf("%s: rules %d notes %q, want none and a note naming %s", tc.name, len(rules), texts, tc.gap)
		}
	}
}

// BenchmarkServiceRuleEndpointChange is the graph's work when one endpoint of
// a Service named by policy changes (its slice rewritten with one address
// replaced, then Flush), with 10,000 Services of 5 endpoints each (50,000
// endpoints) of which 200 are named by active policies. The reference
// (x/ref) is the same graph's work when one remote WorkloadEndpoint's
// labels move it between two selector sets, then Flush.
func BenchmarkServiceRuleEndpointChange(b *testing.B) {
	g := NewGraph(testNode, &counter{})
	g.OnUpdate(up(wep("prod", "client", testNode, "10.0.0.1", map[string]string{"app": "client"})))
	addrs := func(svc, gen int) []string {
		var out []string
		for e := range 5 {
			out = append(out, netip.AddrFrom4([4]byte{10, byte(100 + svc/250), byte(svc % 250), byte(e + 5*(gen%40))}).String())
		}
		return out
	}
	for i := range 10_000 {
		g.OnUpdate(slice("prod", fmt.Sprintf("svc-%d-abc", i), fmt.Sprintf("svc-%d", i), addrs(i, 0), ServicePort{Proto: "tcp", Port: 8080}))
	}
	g.OnUpdate(slicesSynced())
	for i := range 200 {
		g.OnUpdate(up(gnp(fmt.Sprintf("svc-%d", i), "all()", nil, func(s *v3.GlobalNetworkPolicySpec) {
			s.Egress = []v3.Rule{{Action: v3.Allow, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: fmt.Sprintf("svc-%d", i), Namespace: "prod"}}}}
			s.Ingress = []v3.Rule{{Action: v3.Allow, Source: v3.EntityRule{Selector: fmt.Sprintf("app == 'a%d'", i)}}}
		})))
	}
	for i := range 5_000 {
		g.OnUpdate(up(wep("remote", fmt.Sprintf("r%d", i), "node-b", netip.AddrFrom4([4]byte{10, 50, byte(i / 250), byte(i % 250)}).String(),
			map[string]string{"app": fmt.Sprintf("a%d", i%200)})))
	}
	g.OnInSync()
	g.Flush()
	moved := wep("remote", "r7", "node-b", "10.50.0.7", nil)
	var change, ref time.Duration
	b.ResetTimer()
	for i := range b.N {
		svc := i % 200
		u := slice("prod", fmt.Sprintf("svc-%d-abc", svc), fmt.Sprintf("svc-%d", svc), addrs(svc, i/200+1), ServicePort{Proto: "tcp", Port: 8080})
		start := time.Now()
		g.OnUpdate(u)
		g.Flush()
		change += time.Since(start)
		b.StopTimer()
		w := *moved
		w.Labels = map[string]string{"app": fmt.Sprintf("a%d", (i+1)%200)}
		start = time.Now()
		g.OnUpdate(up(&w))
		g.Flush()
		ref += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(change.Seconds()*1e6/float64(b.N), "µs")
	b.ReportMetric(float64(change)/float64(ref), "x/ref")
}
