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
		v.fail("spec.preDNAT", nil, "PreDNAT and DoNotTrack cannot both be true, for a given PolicySpec")
	}
	if (s.DoNotTrack || s.PreDNAT) && !s.ApplyOnForward {
		v.fail("spec.applyOnForward", nil, "ApplyOnForward must be true if either PreDNAT or DoNotTrack is true, for a given PolicySpec")
	}
	if s.PreDNAT {
		if len(s.Egress) > 0 {
			v.fail("spec.egress", nil, "PreDNAT PolicySpec cannot have any Egress rules")
		}
		for _, t := range s.Types {
			if t == PolicyTypeEgress {
				v.fail("spec.types", nil, "PreDNAT PolicySpec cannot have 'egress' Type")
			}
		}
	}
	if strings.Contains(s.NamespaceSelector, "global(") {
		v.fail("spec.namespaceSelector", s.NamespaceSelector, globalSelectorEntRule)
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
			v.fail(f, string(t), "'%s' type specified more than once", t)
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
	if strings.Contains(p.selector, "global(") {
		v.fail("spec.selector", p.selector, globalSelectorEntRule)
	}
	if strings.Contains(p.serviceAccountSelector, "global(") {
		v.fail("spec.serviceAccountSelector", p.serviceAccountSelector, globalSelectorEntRule)
	}
	for i, r := range p.egress {
		f := fmt.Sprintf("spec.egress[%d]", i)
		if r.Source.Services != nil {
			v.fail(f+".source.services", nil, "not allowed in egress rule source")
		}
		if r.HTTP != nil {
			if namespaced {
				v.fail(f+".http", nil, "not allowed in egress rule")
			} else {
				v.fail(f+".http", nil, "not allowed in egress rules")
			}
		}
		if !namespaced && r.Destination.Services != nil && r.Destination.Services.Namespace == "" {
			v.fail(f+".destination.services.namespace", nil, "must specify a namespace")
		}
	}
	for i, r := range p.ingress {
		f := fmt.Sprintf("spec.ingress[%d]", i)
		if r.Destination.Services != nil {
			v.fail(f+".destination.services", nil, "not allowed in ingress rule destination")
		}
		if !namespaced && r.Source.Services != nil && r.Source.Services.Namespace == "" {
			v.fail(f+".source.services.namespace", nil, "must specify a namespace")
		}
	}
}

// Orders and default actions of the tiers whose place Calico fixes.
const (
	KubeAdminTierName     = "kube-admin"
	KubeBaselineTierName  = "kube-baseline"
	KubeAdminTierOrder    = float64(1_000)
	DefaultTierOrder      = float64(1_000_000)
	KubeBaselineTierOrder = float64(10_000_000)
	// The tiers of AdminNetworkPolicies and the
	// BaselineAdminNetworkPolicy, before and after the default tier.
	AdminNetworkPolicyTierName          = "adminnetworkpolicy"
	BaselineAdminNetworkPolicyTierName  = "baselineadminnetworkpolicy"
	AdminNetworkPolicyTierOrder         = float64(1_000)
	BaselineAdminNetworkPolicyTierOrder = float64(10_000_000)
	// The name prefixes Calico gives the GlobalNetworkPolicies of an
	// AdminNetworkPolicy and of the BaselineAdminNetworkPolicy.
	AdminNetworkPolicyNamePrefix         = "kanp.adminnetworkpolicy."
	BaselineAdminNetworkPolicyNamePrefix = "kbanp.baselineadminnetworkpolicy."
	// RuleNameAnnotation is the rule metadata annotation carrying the
	// name of the ANP or BANP rule a rule was converted from.
	RuleNameAnnotation = "name"
)

func (v *validator) tier(t *Tier) {
	if t.Spec.DefaultAction != nil {
		v.enum("spec.defaultAction", string(*t.Spec.DefaultAction), string(Pass), string(Deny))
	}
	if len(t.Name) > 63 {
		v.fail("metadata.name", t.Name, "name is too long by %d bytes", len(t.Name)-63)
	}
	if !dns1123LabelRE().MatchString(t.Name) {
		v.fail("metadata.name", t.Name, "name must consist of lower case alphanumeric characters or '-' (regex: %s)", nameLabelFmt)
	}
	action := Action("")
	if t.Spec.DefaultAction != nil {
		action = *t.Spec.DefaultAction
	}
	for _, w := range []struct {
		name   string
		order  float64
		action Action
	}{
		{KubeAdminTierName, KubeAdminTierOrder, Pass},
		{KubeBaselineTierName, KubeBaselineTierOrder, Pass},
		{DefaultTierName, DefaultTierOrder, Deny},
		{AdminNetworkPolicyTierName, AdminNetworkPolicyTierOrder, Pass},
		{BaselineAdminNetworkPolicyTierName, BaselineAdminNetworkPolicyTierOrder, Pass},
	} {
		if t.Name != w.name {
			continue
		}
		if action != w.action {
			v.fail("spec.defaultAction", string(action), "The '%s' tier must have default action '%s'", w.name, w.action)
		}
		if t.Spec.Order == nil || *t.Spec.Order != w.order {
			v.fail("spec.order", nil, "%s tier order must be %.0f", w.name, w.order)
		}
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

// Calico's messages for rule cross-field checks.
const (
	protocolPortsMsg              = "rules that specify ports must set protocol to TCP or UDP or SCTP"
	protocolSingleOrRangePortsMsg = "rules with numeric port or port range must set protocol to TCP or UDP or SCTP"
	protocolICMPMsg               = "rules that specify ICMP fields must set protocol to ICMP"
	protocolAndHTTPMsg            = "rules that specify HTTP fields must set protocol to TCP or empty"
	globalSelectorEntRule         = "global() can only be used in an EntityRule namespaceSelector"
	globalSelectorOnly            = "global() cannot be combined with other selectors"
	maxRulePorts                  = 50
)

func (v *validator) rule(f string, r *Rule, namespaced bool) {
	switch r.Action {
	case Allow, Deny, Log, Pass:
	case "":
		v.fail(f+".action", nil, "an action is required (Allow, Deny, Log or Pass)")
	default:
		if v.kind == KindProfile {
			// Calico stores any action on a Profile; no dataplane of
			// either enforces one it does not know (docs/not-acted-on.md).
			v.fail(f+".action", string(r.Action), "want one of Allow, Deny, Log, Pass: Palisade refuses an action no dataplane can enforce, where Calico stores it on a Profile")
		} else {
			v.fail(f+".action", string(r.Action), "want one of Allow, Deny, Log, Pass")
		}
	}
	version := 0
	if r.IPVersion != nil {
		if *r.IPVersion != 4 && *r.IPVersion != 6 {
			v.fail(f+".ipVersion", *r.IPVersion, "want 4 or 6")
		} else {
			version = *r.IPVersion
		}
	}
	v.protocol(f+".protocol", r.Protocol)
	v.protocol(f+".notProtocol", r.NotProtocol)
	for _, e := range []struct {
		name string
		e    *EntityRule
	}{{"source", &r.Source}, {"destination", &r.Destination}} {
		for _, pl := range []struct {
			name  string
			ports []numorstring.Port
		}{{"ports", e.e.Ports}, {"notPorts", e.e.NotPorts}} {
			pf := f + "." + e.name + "." + pl.name
			switch {
			case r.Protocol == nil && !allPortsNamed(pl.ports):
				v.fail(pf, nil, protocolSingleOrRangePortsMsg)
			case r.Protocol != nil && !r.Protocol.SupportsPorts() && len(pl.ports) > 0:
				v.fail(pf, nil, protocolPortsMsg)
			}
			if len(pl.ports) > maxRulePorts {
				v.fail(pf, nil, "Too many: %d: must have at most %d items", len(pl.ports), maxRulePorts)
			}
			for i, p := range pl.ports {
				v.port(fmt.Sprintf("%s[%d]", pf, i), p)
			}
		}
	}
	icmpName, icmpv6Name := numorstring.ProtocolICMP, numorstring.ProtocolICMPv6
	if r.ICMP != nil && !isProtocol(r.Protocol, icmpName) && !isProtocol(r.Protocol, icmpv6Name) {
		v.fail(f+".icmp", nil, protocolICMPMsg)
	}
	if (isProtocol(r.Protocol, icmpName) || isProtocol(r.NotProtocol, icmpName)) && version != 0 && version != 4 {
		v.fail(f+".ipVersion", version, "must set ipversion to '4' with protocol icmp")
	}
	if (isProtocol(r.Protocol, icmpv6Name) || isProtocol(r.NotProtocol, icmpv6Name)) && version != 0 && version != 6 {
		v.fail(f+".ipVersion", version, "must set ipversion to '6' with protocol icmpv6")
	}
	v.icmp(f+".icmp", r.ICMP)
	v.icmp(f+".notICMP", r.NotICMP)
	v.ruleNets(f, r)
	v.entity(f+".source", &r.Source, namespaced)
	v.entity(f+".destination", &r.Destination, namespaced)
	if r.HTTP != nil {
		if r.Protocol != nil && !isProtocol(r.Protocol, numorstring.ProtocolTCP) {
			v.fail(f+".protocol", r.Protocol.String(), protocolAndHTTPMsg)
		}
		if r.Action != Allow {
			v.fail(f+".http", nil, "only valid for Allow rules")
		}
		seen := map[string]bool{}
		for _, m := range r.HTTP.Methods {
			if seen[m] {
				v.fail(f+".http.methods", nil, "Invalid methods (duplicates): %v", r.HTTP.Methods)
				break
			}
			seen[m] = true
		}
		for _, p := range r.HTTP.Paths {
			if msg := httpPathProblem(p); msg != "" {
				v.fail(f+".http.paths", nil, "%s", msg)
				break
			}
		}
	}
	if r.Destination.Services != nil && len(r.Destination.Ports) > 0 {
		v.fail(f+".destination.ports", nil, "cannot specify ports with a service selector")
	}
	if r.Destination.Services != nil && len(r.Destination.NotPorts) > 0 {
		v.fail(f+".destination.notPorts", nil, "cannot specify notports with a service selector")
	}
	if r.Metadata != nil {
		v.annotations(f+".metadata.annotations", r.Metadata.Annotations)
	}
}

// httpPathProblem explains what is wrong with an HTTP path match, in
// Calico's words, or returns "".
func httpPathProblem(p HTTPPath) string {
	if p.Exact != "" && p.Prefix != "" {
		return "Invalid path match. Both 'exact' and 'prefix' are set"
	}
	val := p.Exact
	if val == "" {
		val = p.Prefix
	}
	if val == "" {
		return "Invalid path match. Either 'exact' or 'prefix' must be set"
	}
	if !strings.HasPrefix(val, "/") || strings.ContainsAny(val, "? #") {
		return fmt.Sprintf("Invalid path %s. (must start with `/` and not contain `?` or `#`", val)
	}
	return ""
}

// protocol checks a protocol as Calico does: a number 1-255 or one of the
// canonical names, spelled exactly.
func (v *validator) protocol(f string, p *numorstring.Protocol) {
	if p == nil {
		return
	}
	if p.Type == numorstring.NumOrStringNum {
		if p.NumVal == 0 {
			v.fail(f, 0, "protocol number invalid")
		}
		return
	}
	switch p.StrVal {
	case numorstring.ProtocolTCP, numorstring.ProtocolUDP, numorstring.ProtocolICMP, numorstring.ProtocolICMPv6,
		numorstring.ProtocolSCTP, numorstring.ProtocolUDPLite:
	default:
		v.fail(f, p.StrVal, "protocol name invalid")
	}
}

// isProtocol reports whether p is the named protocol (by name or number).
func isProtocol(p *numorstring.Protocol, name string) bool {
	if p == nil {
		return false
	}
	n, err := p.NumValue()
	want, _ := numorstring.ProtocolFromString(name).NumValue()
	return err == nil && n == want
}

func allPortsNamed(ports []numorstring.Port) bool {
	for _, p := range ports {
		if p.PortName == "" {
			return false
		}
	}
	return true
}

// port checks one port of a rule with Calico's messages.
func (v *validator) port(f string, p numorstring.Port) {
	switch {
	case p.PortName != "":
		if err := p.Validate(); err != nil {
			v.failErr(f, err)
		}
	case p.MinPort > p.MaxPort:
		v.fail(f, p.String(), "port range invalid")
	case p.MinPort < 1:
		v.fail(f, p.String(), "port range invalid, port number must be between 1 and 65535")
	}
}

// icmp checks an ICMP type and code.
func (v *validator) icmp(f string, icmp *ICMPFields) {
	if icmp == nil {
		return
	}
	if icmp.Type != nil && (*icmp.Type < 0 || *icmp.Type > 254) {
		v.fail(f+".type", *icmp.Type, "want an ICMP type 0-254")
	}
	if icmp.Code != nil {
		if icmp.Type == nil {
			v.fail(f+".code", *icmp.Code, "ICMP code specified without an ICMP type")
		}
		if *icmp.Code < 0 || *icmp.Code > 255 {
			v.fail(f+".code", *icmp.Code, "want an ICMP code 0-255")
		}
	}
}

// ruleNets checks the nets of both ends of a rule: valid CIDRs, of the
// rule's IP version, and not of both versions.
func (v *validator) ruleNets(f string, r *Rule) {
	var seenV4, seenV6 bool
	for _, n := range []struct {
		field string
		nets  []string
	}{
		{f + ".source.nets", r.Source.Nets}, {f + ".source.notNets", r.Source.NotNets},
		{f + ".destination.nets", r.Destination.Nets}, {f + ".destination.notNets", r.Destination.NotNets},
	} {
		var v4, v6 bool
		for i, s := range n.nets {
			p, ok := parseCIDROrIP(s)
			if !ok {
				v.fail(fmt.Sprintf("%s[%d]", n.field, i), s, "invalid CIDR")
				continue
			}
			v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
			if strings.HasSuffix(n.field, ".notNets") && p.Bits() == 0 {
				v.fail(fmt.Sprintf("%s[%d]", n.field, i), s, "every address is in %s, so a rule that excludes it matches nothing", s)
			}
		}
		if r.IPVersion != nil && (v4 && *r.IPVersion != 4 || v6 && *r.IPVersion != 6) {
			v.fail(n.field, nil, "rule IP version doesn't match CIDR version")
		}
		if v4 && seenV6 || v6 && seenV4 || v4 && v6 {
			v.fail(n.field, nil, "rule contains both IPv4 and IPv6 CIDRs")
		}
		seenV4, seenV6 = seenV4 || v4, seenV6 || v6
	}
}

// entity checks one end of a rule.
func (v *validator) entity(f string, e *EntityRule, namespaced bool) {
	v.selector(f+".selector", e.Selector)
	v.selector(f+".notSelector", e.NotSelector)
	v.selector(f+".namespaceSelector", e.NamespaceSelector)
	if strings.Contains(e.Selector, "global(") {
		v.fail(f+".selector", e.Selector, globalSelectorEntRule)
	}
	if strings.Contains(e.NotSelector, "global(") {
		v.fail(f+".notSelector", e.NotSelector, globalSelectorEntRule)
	}
	if ns := e.NamespaceSelector; strings.Contains(ns, "global(") && strings.TrimSpace(ns) != "global()" {
		v.fail(f+".namespaceSelector", ns, globalSelectorOnly)
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
			v.fail(f+".services", nil, "must specify a service name")
		}
		if e.NamespaceSelector != "" {
			v.fail(f+".services", nil, "cannot specify NamespaceSelector and Services on the same rule")
		}
		if e.Selector != "" || e.NotSelector != "" {
			v.fail(f+".services", nil, "cannot specify Selector/NotSelector and Services on the same rule")
		}
		if e.ServiceAccounts != nil {
			v.fail(f+".services", nil, "cannot specify ServiceAccounts and Services on the same rule")
		}
		if len(e.Nets) != 0 || len(e.NotNets) != 0 {
			v.fail(f+".services", nil, "cannot specify Nets/NotNets and Services on the same rule")
		}
	}
}
