package v3

import (
	"fmt"
	"strings"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
)

// policyCommon is what NetworkPolicy and GlobalNetworkPolicy share.
type policyCommon struct {
	tier                   string
	selector               string
	serviceAccountSelector string
	types                  []PolicyType
	ingress, egress        []Rule
	hints                  []PolicyPerformanceHint
}

func (v *validator) networkPolicy(s *NetworkPolicySpec) {
	v.policy(policyCommon{s.Tier, s.Selector, s.ServiceAccountSelector, s.Types, s.Ingress, s.Egress, s.PerformanceHints}, true)
}

func (v *validator) globalNetworkPolicy(s *GlobalNetworkPolicySpec) {
	v.policy(policyCommon{s.Tier, s.Selector, s.ServiceAccountSelector, s.Types, s.Ingress, s.Egress, s.PerformanceHints}, false)
	v.selector("spec.namespaceSelector", s.NamespaceSelector)
	if s.DoNotTrack && s.PreDNAT {
		v.fail("spec", nil, "doNotTrack and preDNAT cannot both be true")
	}
	if (s.DoNotTrack || s.PreDNAT) && !s.ApplyOnForward {
		v.fail("spec.applyOnForward", nil, "must be true when doNotTrack or preDNAT is true")
	}
	if s.PreDNAT {
		if len(s.Egress) > 0 {
			v.fail("spec.egress", nil, "preDNAT policies take only ingress rules")
		}
		for _, t := range s.Types {
			if t == PolicyTypeEgress {
				v.fail("spec.types", nil, "preDNAT policies apply only to Ingress")
			}
		}
	}
}

func (v *validator) policy(p policyCommon, namespaced bool) {
	if p.tier != "" {
		if msg := dnsSubdomainProblem(p.tier); msg != "" {
			v.fail("spec.tier", p.tier, "invalid tier name: %s", msg)
		}
	}
	v.selector("spec.selector", p.selector)
	v.selector("spec.serviceAccountSelector", p.serviceAccountSelector)
	seen := map[PolicyType]bool{}
	for i, t := range p.types {
		f := fmt.Sprintf("spec.types[%d]", i)
		switch {
		case t != PolicyTypeIngress && t != PolicyTypeEgress:
			v.fail(f, string(t), "want Ingress or Egress")
		case seen[t]:
			v.fail(f, string(t), "listed twice")
		}
		seen[t] = true
	}
	if len(p.types) > 0 {
		if len(p.ingress) > 0 && !seen[PolicyTypeIngress] {
			v.fail("spec.ingress", nil, "ingress rules are given but spec.types does not include Ingress")
		}
		if len(p.egress) > 0 && !seen[PolicyTypeEgress] {
			v.fail("spec.egress", nil, "egress rules are given but spec.types does not include Egress")
		}
	}
	for i, h := range p.hints {
		v.oneOf(fmt.Sprintf("spec.performanceHints[%d]", i), string(h), string(PerfHintAssumeNeededOnEveryNode))
	}
	v.rules("spec.ingress", p.ingress, namespaced)
	v.rules("spec.egress", p.egress, namespaced)
}

func (v *validator) tier(t *Tier) {
	if t.Spec.DefaultAction != nil {
		v.oneOf("spec.defaultAction", string(*t.Spec.DefaultAction), string(Deny), string(Pass))
	}
}

func (v *validator) profile(s *ProfileSpec) {
	v.rules("spec.ingress", s.Ingress, false)
	v.rules("spec.egress", s.Egress, false)
	for k, val := range s.LabelsToApply {
		if msg := labelKeyProblem(k); msg != "" {
			v.fail("spec.labelsToApply", k, "invalid label key: %s", msg)
		}
		if val != "" && (len(val) > 63 || !labelNameRE().MatchString(val)) {
			v.fail("spec.labelsToApply."+k, val, "invalid label value")
		}
	}
}

func (v *validator) rules(field string, rules []Rule, namespaced bool) {
	for i := range rules {
		v.rule(fmt.Sprintf("%s[%d]", field, i), &rules[i], namespaced)
	}
}

func (v *validator) rule(f string, r *Rule, namespaced bool) {
	switch r.Action {
	case Allow, Deny, Log, Pass:
	case "":
		v.fail(f+".action", nil, "an action is required (Allow, Deny, Log or Pass)")
	default:
		v.fail(f+".action", string(r.Action), "want one of Allow, Deny, Log, Pass")
	}
	version := 0
	if r.IPVersion != nil {
		if *r.IPVersion != 4 && *r.IPVersion != 6 {
			v.fail(f+".ipVersion", *r.IPVersion, "want 4 or 6")
		} else {
			version = *r.IPVersion
		}
	}
	portsOK := false
	if r.Protocol != nil {
		if err := r.Protocol.Validate(); err != nil {
			v.failErr(f+".protocol", err)
		} else {
			portsOK = r.Protocol.SupportsPorts()
		}
	}
	if r.NotProtocol != nil {
		if err := r.NotProtocol.Validate(); err != nil {
			v.failErr(f+".notProtocol", err)
		}
	}
	v.icmp(f+".icmp", r.ICMP, r.Protocol, version)
	v.icmp(f+".notICMP", r.NotICMP, r.Protocol, version)
	v.entity(f+".source", &r.Source, r.Protocol, portsOK, version, namespaced)
	v.entity(f+".destination", &r.Destination, r.Protocol, portsOK, version, namespaced)
	if r.HTTP != nil {
		for i, p := range r.HTTP.Paths {
			if (p.Exact == "") == (p.Prefix == "") {
				v.fail(fmt.Sprintf("%s.http.paths[%d]", f, i), nil, "exactly one of exact and prefix is required")
			}
		}
		for i, m := range r.HTTP.Methods {
			if m == "" || strings.ContainsAny(m, " \t") {
				v.fail(fmt.Sprintf("%s.http.methods[%d]", f, i), m, "invalid HTTP method")
			}
		}
	}
}

// icmp checks ICMP type and code, and that the rule's protocol is ICMP or
// ICMPv6 and agrees with ipVersion.
func (v *validator) icmp(f string, icmp *ICMPFields, proto *numorstring.Protocol, version int) {
	if icmp == nil {
		return
	}
	n := uint8(0)
	if proto != nil {
		n, _ = proto.NumValue()
	}
	switch {
	case n != 1 && n != 58:
		v.fail(f, nil, "ICMP matches need protocol ICMP or ICMPv6")
	case n == 1 && version == 6:
		v.fail(f, nil, "protocol ICMP is IPv4 but ipVersion is 6: use ICMPv6")
	case n == 58 && version == 4:
		v.fail(f, nil, "protocol ICMPv6 is IPv6 but ipVersion is 4: use ICMP")
	}
	if icmp.Type != nil && (*icmp.Type < 0 || *icmp.Type > 254) {
		v.fail(f+".type", *icmp.Type, "want an ICMP type 0-254")
	}
	if icmp.Code != nil {
		if icmp.Type == nil {
			v.fail(f+".code", *icmp.Code, "an ICMP code needs an ICMP type")
		}
		if *icmp.Code < 0 || *icmp.Code > 255 {
			v.fail(f+".code", *icmp.Code, "want an ICMP code 0-255")
		}
	}
}

// entity checks one end of a rule.
func (v *validator) entity(f string, e *EntityRule, proto *numorstring.Protocol, portsOK bool, version int, namespaced bool) {
	v.nets(f+".nets", e.Nets, version)
	v.nets(f+".notNets", e.NotNets, version)
	v.selector(f+".selector", e.Selector)
	v.selector(f+".notSelector", e.NotSelector)
	v.selector(f+".namespaceSelector", e.NamespaceSelector)
	for _, pl := range []struct {
		name  string
		ports []numorstring.Port
	}{{"ports", e.Ports}, {"notPorts", e.NotPorts}} {
		if len(pl.ports) > 0 && !portsOK {
			what := "no protocol"
			if proto != nil {
				what = fmt.Sprintf("protocol %s", proto)
			}
			v.fail(f+"."+pl.name, nil, "ports need protocol TCP, UDP or SCTP, not %s", what)
		}
		for i, p := range pl.ports {
			if err := p.Validate(); err != nil {
				v.failErr(fmt.Sprintf("%s.%s[%d]", f, pl.name, i), err)
			}
		}
	}
	if sa := e.ServiceAccounts; sa != nil {
		v.selector(f+".serviceAccounts.selector", sa.Selector)
		for i, n := range sa.Names {
			if msg := dnsSubdomainProblem(n); msg != "" {
				v.fail(fmt.Sprintf("%s.serviceAccounts.names[%d]", f, i), n, "invalid service account name: %s", msg)
			}
		}
	}
	if svc := e.Services; svc != nil {
		if svc.Name == "" {
			v.fail(f+".services.name", nil, "a service name is required")
		}
		if len(e.Nets)+len(e.NotNets) > 0 || e.Selector != "" || e.NotSelector != "" ||
			e.NamespaceSelector != "" || e.ServiceAccounts != nil {
			v.fail(f+".services", nil, "cannot be combined with nets, notNets, selector, notSelector, namespaceSelector or serviceAccounts")
		}
		if namespaced && svc.Namespace != "" {
			v.fail(f+".services.namespace", svc.Namespace, "a namespaced policy can only match services in its own namespace")
		}
	}
}
