package calc

import (
	"fmt"
	"net/netip"
	"slices"
)

// recorder is a Dataplane that accumulates the state it is told and checks
// the dependency order on every call.
type recorder struct {
	config    *Config
	sets      map[string]map[string]bool
	setTypes  map[string]IPSetType
	policies  map[PolicyID]*Policy
	profiles  map[string]*Profile
	endpoints map[EndpointID]*Endpoint
	routes    map[netip.Prefix]string
	inSync    bool
	errs      []string
	calls     int
}

func newRecorder() *recorder {
	return &recorder{
		sets: map[string]map[string]bool{}, setTypes: map[string]IPSetType{},
		policies: map[PolicyID]*Policy{}, profiles: map[string]*Profile{},
		endpoints: map[EndpointID]*Endpoint{}, routes: map[netip.Prefix]string{},
	}
}

func (r *recorder) errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }

func ruleSets(rules []Rule) []string {
	var out []string
	for _, x := range rules {
		for _, l := range [][]string{x.SrcIPSets, x.NotSrcIPSets, x.DstIPSets, x.NotDstIPSets,
			x.SrcNamedPortIPSets, x.NotSrcNamedPortIPSets, x.DstNamedPortIPSets, x.NotDstNamedPortIPSets} {
			out = append(out, l...)
		}
	}
	return out
}

func (r *recorder) OnConfigUpdate(c *Config) { r.calls++; r.config = c }

func (r *recorder) OnIPSetUpdate(s *IPSet) {
	r.calls++
	m := map[string]bool{}
	for _, x := range s.Members {
		m[x] = true
	}
	r.sets[s.ID], r.setTypes[s.ID] = m, s.Type
}

func (r *recorder) OnIPSetDelta(id string, added, removed []string) {
	r.calls++
	m := r.sets[id]
	if m == nil {
		r.errorf("delta of unknown set %s", id)
		return
	}
	for _, x := range removed {
		if !m[x] {
			r.errorf("set %s: removing absent member %s", id, x)
		}
		delete(m, x)
	}
	for _, x := range added {
		if m[x] {
			r.errorf("set %s: adding present member %s", id, x)
		}
		m[x] = true
	}
}

func (r *recorder) OnIPSetRemoved(id string) {
	r.calls++
	if r.sets[id] == nil {
		r.errorf("removal of unknown set %s", id)
	}
	for pid, p := range r.policies {
		if slices.Contains(ruleSets(append(slices.Clone(p.Inbound), p.Outbound...)), id) {
			r.errorf("set %s removed while policy %v uses it", id, pid)
		}
	}
	for name, p := range r.profiles {
		if slices.Contains(ruleSets(append(slices.Clone(p.Inbound), p.Outbound...)), id) {
			r.errorf("set %s removed while profile %s uses it", id, name)
		}
	}
	delete(r.sets, id)
	delete(r.setTypes, id)
}

func (r *recorder) checkRules(what string, rules []Rule) {
	for _, id := range ruleSets(rules) {
		if r.sets[id] == nil {
			r.errorf("%s uses set %s before it was sent", what, id)
		}
	}
}

func (r *recorder) OnPolicyUpdate(p *Policy) {
	r.calls++
	r.checkRules(fmt.Sprint("policy ", p.ID), append(slices.Clone(p.Inbound), p.Outbound...))
	r.policies[p.ID] = p
}

func (r *recorder) OnPolicyRemoved(id PolicyID) {
	r.calls++
	for eid, e := range r.endpoints {
		for _, ts := range [][]TierPolicies{e.Tiers, e.ForwardTiers, e.PreDNATTiers, e.UntrackedTiers} {
			for _, t := range ts {
				if slices.Contains(t.Ingress, id) || slices.Contains(t.Egress, id) {
					r.errorf("policy %v removed while endpoint %v uses it", id, eid)
				}
			}
		}
	}
	delete(r.policies, id)
}

func (r *recorder) OnProfileUpdate(p *Profile) {
	r.calls++
	r.checkRules("profile "+p.Name, append(slices.Clone(p.Inbound), p.Outbound...))
	r.profiles[p.Name] = p
}

func (r *recorder) OnProfileRemoved(name string) {
	r.calls++
	for eid, e := range r.endpoints {
		if slices.Contains(e.Profiles, name) {
			r.errorf("profile %s removed while endpoint %v uses it", name, eid)
		}
	}
	delete(r.profiles, name)
}

func (r *recorder) OnEndpointUpdate(e *Endpoint) {
	r.calls++
	for _, ts := range [][]TierPolicies{e.Tiers, e.ForwardTiers, e.PreDNATTiers, e.UntrackedTiers} {
		for _, t := range ts {
			for _, id := range append(slices.Clone(t.Ingress), t.Egress...) {
				if r.policies[id] == nil {
					r.errorf("endpoint %v uses policy %v before it was sent", e.ID, id)
				}
			}
		}
	}
	for _, p := range e.Profiles {
		if r.profiles[p] == nil {
			r.errorf("endpoint %v uses profile %s before it was sent", e.ID, p)
		}
	}
	r.endpoints[e.ID] = e
}

func (r *recorder) OnEndpointRemoved(id EndpointID) {
	r.calls++
	if r.endpoints[id] == nil {
		r.errorf("removal of unknown endpoint %v", id)
	}
	delete(r.endpoints, id)
}

func (r *recorder) OnRouteUpdate(rt Route) { r.calls++; r.routes[rt.Dst] = rt.Iface }

func (r *recorder) OnRouteRemoved(dst netip.Prefix) {
	r.calls++
	if _, ok := r.routes[dst]; !ok {
		r.errorf("removal of unknown route %v", dst)
	}
	delete(r.routes, dst)
}

func (r *recorder) OnInSync() { r.calls++; r.inSync = true }
