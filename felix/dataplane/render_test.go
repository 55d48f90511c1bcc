package dataplane

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
)

// flat lists a ruleset as sorted "table chain hash…" lines.
func flat(rs *rules.Ruleset) []string {
	var out []string
	for t, cs := range rs.Tables {
		for _, c := range cs {
			var h []string
			for _, r := range c.Rules {
				h = append(h, r.Hash)
			}
			out = append(out, t+" "+c.Name+" "+strings.Join(h, ","))
		}
	}
	for _, j := range rs.Jumps {
		out = append(out, "jump "+j.Table+" "+j.Chain+" "+j.Rule.Hash)
	}
	slices.Sort(out)
	return out
}

type world struct {
	cfg   *calc.Config
	pols  map[calc.PolicyID]*calc.Policy
	profs map[string]*calc.Profile
	eps   map[calc.EndpointID]*calc.Endpoint
}

func pid(name string) calc.PolicyID { return calc.PolicyID{Tier: "default", Name: name} }

func newWorld() *world {
	w := &world{cfg: calc.MergeConfig(nil, nil), pols: map[calc.PolicyID]*calc.Policy{}, profs: map[string]*calc.Profile{}, eps: map[calc.EndpointID]*calc.Endpoint{}}
	w.setPolicy("allow-web", 80, func(p *calc.Policy) {})
	w.setPolicy("untracked", 22, func(p *calc.Policy) { p.DoNotTrack = true })
	w.setPolicy("prednat", 443, func(p *calc.Policy) { p.PreDNAT = true })
	w.setPolicy("forward", 8080, func(p *calc.Policy) { p.ApplyOnForward = true })
	w.profs["kns.a"] = &calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}}
	for i := range 3 {
		w.setWorkload(i, []string{"allow-web"})
	}
	hid := calc.EndpointID{Kind: calc.HostEndpoint, Name: "eth0"}
	w.eps[hid] = &calc.Endpoint{ID: hid, InterfaceName: "eth0",
		Tiers:          []calc.TierPolicies{{Name: "default", Ingress: []calc.PolicyID{pid("allow-web")}}},
		ForwardTiers:   []calc.TierPolicies{{Name: "default", Ingress: []calc.PolicyID{pid("forward")}}},
		UntrackedTiers: []calc.TierPolicies{{Name: "default", Ingress: []calc.PolicyID{pid("untracked")}}},
		PreDNATTiers:   []calc.TierPolicies{{Name: "default", Ingress: []calc.PolicyID{pid("prednat")}}}}
	return w
}

func (w *world) setPolicy(name string, port uint16, mod func(*calc.Policy)) {
	p := &calc.Policy{ID: pid(name), Ingress: true, Egress: true,
		Inbound:  []calc.Rule{{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: port, Max: port}}}},
		Outbound: []calc.Rule{{Action: calc.Deny, SrcNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}}
	mod(p)
	w.pols[p.ID] = p
}

func (w *world) setWorkload(i int, pols []string) {
	id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: fmt.Sprint("w", i)}
	var ids []calc.PolicyID
	for _, p := range pols {
		ids = append(ids, pid(p))
	}
	w.eps[id] = &calc.Endpoint{ID: id, InterfaceName: fmt.Sprintf("cali%d", i), Profiles: []string{"kns.a"},
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 65, 0, byte(i + 1)}), 32)},
		Tiers:    []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: ids, Egress: ids}}}
}

// spoof gives workload i allowSpoofedSourcePrefixes (a new value, as the
// graph sends).
func (w *world) spoof(i int, prefixes ...string) {
	id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: fmt.Sprint("w", i)}
	e := *w.eps[id]
	e.AllowSpoofedSourcePrefixes = nil
	for _, p := range prefixes {
		e.AllowSpoofedSourcePrefixes = append(e.AllowSpoofedSourcePrefixes, netip.MustParsePrefix(p))
	}
	w.eps[id] = &e
}

// float gives workload i IPNATs of its address to the floating IPs (a
// new value, as the graph sends).
func (w *world) float(i int, floating ...string) {
	id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: fmt.Sprint("w", i)}
	e := *w.eps[id]
	e.IPNATs = nil
	for _, f := range floating {
		e.IPNATs = append(e.IPNATs, calc.NAT{Internal: e.IPv4Nets[0].Addr(), External: netip.MustParseAddr(f)})
	}
	w.eps[id] = &e
}

// TestRendererMatchesRender checks that the incremental renderer gives
// exactly rules.Render's chains, through a series of changes.
func TestRendererMatchesRender(t *testing.T) {
	w := newWorld()
	r := newRenderer(4)
	steps := []struct {
		name   string
		change func()
	}{
		{"initial", func() {}},
		{"policy changed", func() { w.setPolicy("allow-web", 81, func(*calc.Policy) {}) }},
		{"endpoint added", func() { w.setWorkload(7, []string{"allow-web", "forward"}) }},
		{"endpoint removed", func() { delete(w.eps, calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w1"}) }},
		{"policy removed", func() { delete(w.pols, pid("forward")) }},
		{"policy back, endpoints referring to it rendered again", func() { w.setPolicy("forward", 8081, func(p *calc.Policy) { p.ApplyOnForward = true }) }},
		{"profile removed", func() { delete(w.profs, "kns.a") }},
		{"profile back", func() {
			w.profs["kns.a"] = &calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}, {Action: calc.Log}}}
		}},
		{"preDNAT policy changed", func() { w.setPolicy("prednat", 444, func(p *calc.Policy) { p.PreDNAT = true }) }},
		{"config changed", func() {
			c := *w.cfg
			c.DefaultEndpointToHostAction = "Accept"
			w.cfg = &c
		}},
		{"untracked policy changed", func() { w.setPolicy("untracked", 23, func(p *calc.Policy) { p.DoNotTrack = true }) }},
		{"spoofed prefixes allowed", func() { w.spoof(2, "192.0.2.0/24", "198.51.100.7/32") }},
		{"second spoofer", func() { w.spoof(0, "203.0.113.0/24") }},
		{"spoofed prefixes changed", func() { w.spoof(2, "192.0.2.0/25") }},
		{"spoofer's prefixes cleared", func() { w.spoof(0) }},
		{"config changed with a spoofer", func() {
			c := *w.cfg
			c.DefaultEndpointToHostAction = "Return"
			w.cfg = &c
		}},
		{"spoofer removed", func() { delete(w.eps, calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w2"}) }},
		{"floating IP", func() { w.float(0, "203.0.113.10") }},
		{"second floating workload", func() { w.float(7, "203.0.113.17", "203.0.113.1") }},
		{"floating IP changed", func() { w.float(0, "203.0.113.11") }},
		{"floating IPs cleared", func() { w.float(7) }},
		{"config changed with floating IPs", func() {
			c := *w.cfg
			c.DefaultEndpointToHostAction = "Drop"
			w.cfg = &c
		}},
		{"floating workload removed", func() { delete(w.eps, calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w0"}) }},
	}
	for _, s := range steps {
		s.change()
		want := flat(rules.Render(rules.Input{Config: w.cfg, IPVersion: 4, Policies: maps.Clone(w.pols), Profiles: maps.Clone(w.profs), Endpoints: maps.Clone(w.eps)}))
		got := flat(r.render(w.cfg, w.pols, w.profs, w.eps))
		if !slices.Equal(got, want) {
			for _, l := range want {
				if !slices.Contains(got, l) {
					t.Errorf("%s: missing %s", s.name, l)
				}
			}
			for _, l := range got {
				if !slices.Contains(want, l) {
					t.Errorf("%s: extra %s", s.name, l)
				}
			}
		}
	}
}
