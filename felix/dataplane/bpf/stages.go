package bpf

import (
	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// Stages are the policy inputs of an endpoint's stages (nil: the stage
// has no program). Index by palbpf.Stage*.
type Stages [palbpf.Stages]*policy.Input

// StagesOf works out an endpoint's stages with Calico's semantics, as the
// iptables dataplane renders them:
//
//   - workload, packets from it (in): its egress tiers, then its profiles'
//     outbound rules; to it (out): ingress tiers, inbound rules;
//   - host endpoint, normal: ingress tiers and inbound rules in, egress
//     and outbound out (traffic to and from the host itself);
//   - host endpoint, forward (applyOnForward, forwarded traffic): only
//     when a policy applies in the direction; no profiles;
//   - host endpoint, preDNAT (in) and doNotTrack (both): no decision when
//     nothing matched, and the walk goes on.
//
// Policies and profiles that do not exist are left out.
func StagesOf(ep *calc.Endpoint, policies map[calc.PolicyID]*calc.Policy, profiles map[string]*calc.Profile) Stages {
	var s Stages
	if ep.ID.Kind == calc.WorkloadEndpoint {
		s[palbpf.StageNormalIn] = final(ep.Tiers, ep.Profiles, false, policies, profiles)
		s[palbpf.StageNormalOut] = final(ep.Tiers, ep.Profiles, true, policies, profiles)
		return s
	}
	s[palbpf.StageNormalIn] = final(ep.Tiers, ep.Profiles, true, policies, profiles)
	s[palbpf.StageNormalOut] = final(ep.Tiers, ep.Profiles, false, policies, profiles)
	for _, d := range []struct {
		stage   int
		ingress bool
	}{{palbpf.StageForwardIn, true}, {palbpf.StageForwardOut, false}} {
		if anyPolicy(ep.ForwardTiers, d.ingress, policies) {
			s[d.stage] = final(ep.ForwardTiers, nil, d.ingress, policies, profiles)
		}
	}
	if anyTier(ep.PreDNATTiers, true) {
		s[palbpf.StagePreDNATIn] = &policy.Input{Tiers: tiers(ep.PreDNATTiers, true, policies)}
	}
	if anyTier(ep.UntrackedTiers, true) {
		s[palbpf.StageUntrackedIn] = &policy.Input{Tiers: tiers(ep.UntrackedTiers, true, policies)}
	}
	if anyTier(ep.UntrackedTiers, false) {
		s[palbpf.StageUntrackedOut] = &policy.Input{Tiers: tiers(ep.UntrackedTiers, false, policies)}
	}
	return s
}

// final is a stage that ends in Deny: tiers, then profiles.
func final(ts []calc.TierPolicies, profs []string, ingress bool, policies map[calc.PolicyID]*calc.Policy, profiles map[string]*calc.Profile) *policy.Input {
	in := &policy.Input{Final: true, Tiers: tiers(ts, ingress, policies)}
	for _, name := range profs {
		p := profiles[name]
		if p == nil {
			continue
		}
		rules := p.Outbound
		if ingress {
			rules = p.Inbound
		}
		in.Profiles = append(in.Profiles, policy.Profile{Name: name, Rules: rules})
	}
	return in
}

// tiers are the tiers with a policy listed in the direction, each with
// the policies that exist.
func tiers(ts []calc.TierPolicies, ingress bool, policies map[calc.PolicyID]*calc.Policy) []policy.Tier {
	var out []policy.Tier
	for _, t := range ts {
		ids := t.Egress
		if ingress {
			ids = t.Ingress
		}
		if len(ids) == 0 {
			continue
		}
		pt := policy.Tier{Name: t.Name, DefaultAction: t.DefaultAction}
		for _, id := range ids {
			p := policies[id]
			if p == nil {
				continue
			}
			rules := p.Outbound
			if ingress {
				rules = p.Inbound
			}
			pt.Policies = append(pt.Policies, policy.Policy{ID: id, Rules: rules})
		}
		out = append(out, pt)
	}
	return out
}

func anyTier(ts []calc.TierPolicies, ingress bool) bool { return calc.HasPolicy(ts, ingress) }

// anyPolicy reports whether a policy that exists applies in the direction.
func anyPolicy(ts []calc.TierPolicies, ingress bool, policies map[calc.PolicyID]*calc.Policy) bool {
	for _, t := range ts {
		ids := t.Egress
		if ingress {
			ids = t.Ingress
		}
		for _, id := range ids {
			if policies[id] != nil {
				return true
			}
		}
	}
	return false
}
