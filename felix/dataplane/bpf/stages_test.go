package bpf

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
	"github.com/palisade-net/palisade/libcalico/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// describeStages writes an endpoint's stage table: per stage, its tiers,
// policies and rules (or profiles), as the programs will run them.
func describeStages(s Stages) string {
	var b strings.Builder
	for i, in := range s {
		if in == nil {
			continue
		}
		fmt.Fprintf(&b, "%s (final=%v):\n", palbpf.StageNames[i], in.Final)
		for _, t := range in.Tiers {
			fmt.Fprintf(&b, "  tier %s (end: %s)\n", t.Name, t.DefaultAction)
			for _, p := range t.Policies {
				fmt.Fprintf(&b, "    policy %s\n", p.ID)
				for _, r := range p.Rules {
					fmt.Fprintf(&b, "      %s %s\n", r.Action, policy.Describe(r))
				}
			}
		}
		for _, p := range in.Profiles {
			fmt.Fprintf(&b, "  profile %s\n", p.Name)
			for _, r := range p.Rules {
				fmt.Fprintf(&b, "    %s %s\n", r.Action, policy.Describe(r))
			}
		}
	}
	return b.String()
}

// TestStagesGolden compares the stage tables of a workload and of a host
// endpoint with every kind of policy against golden files.
func TestStagesGolden(t *testing.T) {
	pol := func(name string, in, out []calc.Rule, ingress, egress bool) *calc.Policy {
		return &calc.Policy{ID: calc.PolicyID{Tier: "default", Name: name}, Inbound: in, Outbound: out, Ingress: ingress, Egress: egress}
	}
	tcp80 := []calc.Rule{{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 80, Max: 80}}}}
	denyAll := []calc.Rule{{Action: calc.Deny}}
	policies := map[calc.PolicyID]*calc.Policy{}
	for _, p := range []*calc.Policy{
		pol("web-in", tcp80, nil, true, false), pol("web-out", nil, denyAll, false, true),
		pol("host-normal", tcp80, tcp80, true, true), pol("host-fwd", tcp80, nil, true, false),
		pol("host-prednat", denyAll, nil, true, false), pol("host-untracked", tcp80, tcp80, true, true),
	} {
		policies[p.ID] = p
	}
	sec := calc.PolicyID{Tier: "security", Name: "gate"}
	policies[sec] = &calc.Policy{ID: sec, Inbound: []calc.Rule{{Action: calc.Pass}}, Ingress: true}
	profiles := map[string]*calc.Profile{"kns.a": {Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}}}
	id := func(name string) calc.PolicyID { return calc.PolicyID{Tier: "default", Name: name} }
	cases := map[string]*calc.Endpoint{
		"workload": {ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "web"}, InterfaceName: "caliweb",
			Tiers: []calc.TierPolicies{
				{Name: "security", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{sec}},
				{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id("web-in"), id("absent")}, Egress: []calc.PolicyID{id("web-out")}},
			},
			Profiles: []string{"kns.a", "kns.absent"}},
		"host-endpoint": {ID: calc.EndpointID{Kind: calc.HostEndpoint, Name: "ext"}, InterfaceName: "eth0",
			Tiers:          []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id("host-normal"), id("host-fwd")}, Egress: []calc.PolicyID{id("host-normal")}}},
			ForwardTiers:   []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id("host-fwd")}}},
			PreDNATTiers:   []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id("host-prednat")}}},
			UntrackedTiers: []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{id("host-untracked")}, Egress: []calc.PolicyID{id("host-untracked")}}}},
	}
	for name, ep := range cases {
		t.Run(name, func(t *testing.T) {
			golden.Check(t, filepath.Join("testdata", "stages-"+name+".golden"), describeStages(StagesOf(ep, policies, profiles)), *update)
		})
	}
}
