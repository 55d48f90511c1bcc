package k8s

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Names Calico gives the tiers and policies of the network-policy-api
// objects (policy.networking.k8s.io/v1alpha1).
const (
	// AdminPolicyNamePrefix prefixes the GlobalNetworkPolicy of an
	// AdminNetworkPolicy.
	AdminPolicyNamePrefix = v3.AdminNetworkPolicyNamePrefix
	// BaselinePolicyNamePrefix prefixes the GlobalNetworkPolicy of the
	// BaselineAdminNetworkPolicy.
	BaselinePolicyNamePrefix = v3.BaselineAdminNetworkPolicyNamePrefix
	// AdminRuleNameAnnotation is the rule metadata annotation that carries
	// the ANP or BANP rule's name.
	AdminRuleNameAnnotation = v3.RuleNameAnnotation
	// BaselinePolicyOrder is the order of the BaselineAdminNetworkPolicy's
	// GlobalNetworkPolicy, the only policy of its tier.
	BaselinePolicyOrder = 1000.0
)

// AdminPolicyName is the GlobalNetworkPolicy name of an ANP.
func AdminPolicyName(name string) string { return AdminPolicyNamePrefix + name }

// BaselinePolicyName is the GlobalNetworkPolicy name of a BANP.
func BaselinePolicyName(name string) string { return BaselinePolicyNamePrefix + name }

// AdminTiers are the two tiers the converted policies live in: the
// adminnetworkpolicy tier before the default tier and the
// baselineadminnetworkpolicy tier after it, both ending in Pass, so that
// traffic no rule of theirs matches goes on to the next tier.
func AdminTiers() []*v3.Tier {
	out := make([]*v3.Tier, 0, 2)
	for _, t := range []struct {
		name  string
		order float64
	}{{v3.AdminNetworkPolicyTierName, v3.AdminNetworkPolicyTierOrder}, {v3.BaselineAdminNetworkPolicyTierName, v3.BaselineAdminNetworkPolicyTierOrder}} {
		order, pass := t.order, v3.Pass
		out = append(out, &v3.Tier{
			TypeMeta:   v3.TypeMeta{Kind: v3.KindTier, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: t.name},
			Spec:       v3.TierSpec{Order: &order, DefaultAction: &pass},
		})
	}
	return out
}

// NodeAddresses lists, as /32 or /128 CIDRs in a stable order, the
// addresses of the nodes a selector picks; egress `nodes` peers become
// them.
type NodeAddresses func(labels.Selector) []string

// AdminProblem is one part of an ANP or BANP the conversion could not
// express, and what was enforced in its place.
type AdminProblem struct {
	// Rule is "ingress[i]" or "egress[i]" with the rule's name, or
	// "subject".
	Rule string
	Err  error
	// Enforced says what replaced the part: "omitted" (an Allow matching
	// nothing) or "deny" (a Deny wider than written).
	Enforced string
}

func (p AdminProblem) String() string {
	return fmt.Sprintf("%s: %v (%s)", p.Rule, p.Err, p.Enforced)
}

// AdminProblems is every problem of one conversion; nil when it
// converted whole.
type AdminProblems []AdminProblem

func (ps AdminProblems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// adminRule is an ANP or BANP rule, in either direction, as both APIs
// share its parts.
type adminRule struct {
	name   string
	action string
	ports  *[]anpv1.AdminNetworkPolicyPort
	peers  []adminPeer
}

// adminPeer is an ingress or egress peer.
type adminPeer struct {
	namespaces  *metav1.LabelSelector
	pods        *anpv1.NamespacedPod
	nodes       *metav1.LabelSelector
	networks    []anpv1.CIDR
	domainNames []anpv1.DomainName
}

// AdminNetworkPolicy converts an ANP into the GlobalNetworkPolicy
// kanp.adminnetworkpolicy.<name> of the adminnetworkpolicy tier, ordered
// by its priority (equal priorities fall back to name order, which the
// API leaves to the implementation). Rules keep their order; each becomes
// one Calico rule per protocol and peer, carrying the rule's name in its
// metadata.
//
// What cannot be expressed fails closed and is returned as AdminProblems
// with the policy: an Allow part is left out (it matches nothing); a Deny
// or Pass part becomes a Deny, of everyone on its ports when a peer
// cannot be read and of every port when its ports cannot (so no later
// rule can allow what it might have stopped); a subject that cannot be
// read makes the policy deny all traffic of every Kubernetes pod.
func AdminNetworkPolicy(anp *anpv1.AdminNetworkPolicy, nodes NodeAddresses) (*v3.GlobalNetworkPolicy, error) {
	order := float64(anp.Spec.Priority)
	var in, eg []adminRule
	for _, r := range anp.Spec.Ingress {
		in = append(in, adminRule{name: r.Name, action: string(r.Action), ports: r.Ports, peers: ingressPeers(r.From)})
	}
	for _, r := range anp.Spec.Egress {
		peers := make([]adminPeer, 0, len(r.To))
		for _, p := range r.To {
			peers = append(peers, adminPeer{namespaces: p.Namespaces, pods: p.Pods, nodes: p.Nodes, networks: p.Networks, domainNames: p.DomainNames})
		}
		eg = append(eg, adminRule{name: r.Name, action: string(r.Action), ports: r.Ports, peers: peers})
	}
	return adminPolicy(AdminPolicyName(anp.Name), v3.AdminNetworkPolicyTierName, order, &anp.Spec.Subject, in, eg, true, nodes)
}

// BaselineAdminNetworkPolicy converts the BANP into the
// GlobalNetworkPolicy kbanp.baselineadminnetworkpolicy.<name> of the
// baselineadminnetworkpolicy tier, as AdminNetworkPolicy does (a BANP has
// no Pass).
func BaselineAdminNetworkPolicy(banp *anpv1.BaselineAdminNetworkPolicy, nodes NodeAddresses) (*v3.GlobalNetworkPolicy, error) {
	var in, eg []adminRule
	for _, r := range banp.Spec.Ingress {
		in = append(in, adminRule{name: r.Name, action: string(r.Action), ports: r.Ports, peers: ingressPeers(r.From)})
	}
	for _, r := range banp.Spec.Egress {
		peers := make([]adminPeer, 0, len(r.To))
		for _, p := range r.To {
			peers = append(peers, adminPeer{namespaces: p.Namespaces, pods: p.Pods, nodes: p.Nodes, networks: p.Networks})
		}
		eg = append(eg, adminRule{name: r.Name, action: string(r.Action), ports: r.Ports, peers: peers})
	}
	return adminPolicy(BaselinePolicyName(banp.Name), v3.BaselineAdminNetworkPolicyTierName, BaselinePolicyOrder, &banp.Spec.Subject, in, eg, false, nodes)
}

func ingressPeers(from []anpv1.AdminNetworkPolicyIngressPeer) []adminPeer {
	peers := make([]adminPeer, 0, len(from))
	for _, p := range from {
		peers = append(peers, adminPeer{namespaces: p.Namespaces, pods: p.Pods})
	}
	return peers
}

func adminPolicy(name, tier string, order float64, subject *anpv1.AdminNetworkPolicySubject, in, eg []adminRule,
	passAllowed bool, nodes NodeAddresses) (*v3.GlobalNetworkPolicy, error) {
	out := &v3.GlobalNetworkPolicy{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindGlobalNetworkPolicy, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: name},
		Spec:       v3.GlobalNetworkPolicySpec{Tier: tier, Order: &order},
	}
	var problems AdminProblems
	sel, nsSel, err := adminSubject(subject)
	if err != nil {
		// Every pod, every direction, denied: the subject is unknown.
		out.Spec.Selector = orchestratorSelector
		out.Spec.Types = []v3.PolicyType{v3.PolicyTypeIngress, v3.PolicyTypeEgress}
		deny := []v3.Rule{{Action: v3.Deny}}
		out.Spec.Ingress, out.Spec.Egress = deny, slices.Clone(deny)
		return out, AdminProblems{{Rule: "subject", Err: err, Enforced: "deny all traffic of every pod"}}
	}
	out.Spec.Selector, out.Spec.NamespaceSelector = sel, nsSel
	out.Spec.Ingress, problems = adminRules("ingress", in, true, passAllowed, nodes, problems)
	out.Spec.Egress, problems = adminRules("egress", eg, false, passAllowed, nodes, problems)
	if len(in) > 0 || len(eg) == 0 {
		out.Spec.Types = append(out.Spec.Types, v3.PolicyTypeIngress)
	}
	if len(eg) > 0 || len(in) == 0 {
		out.Spec.Types = append(out.Spec.Types, v3.PolicyTypeEgress)
	}
	if problems != nil {
		return out, problems
	}
	return out, nil
}

// adminSubject is the policy's selector and namespaceSelector: the
// namespaces' pods, or the pods the pod selector picks in the namespaces
// the namespace selector picks. The API requires exactly one of the two.
func adminSubject(s *anpv1.AdminNetworkPolicySubject) (sel, nsSel string, err error) {
	switch {
	case s.Namespaces != nil && s.Pods != nil:
		return "", "", errors.New("both namespaces and pods")
	case s.Namespaces != nil:
		nsSel, err = selector(s.Namespaces, selectNamespaces)
		if err != nil {
			return "", "", fmt.Errorf("subject.namespaces: %w", err)
		}
		return orchestratorSelector, nsSel, nil
	case s.Pods != nil:
		return namespacedPod(s.Pods, "subject.pods")
	}
	return "", "", errors.New("neither namespaces nor pods")
}

// namespacedPod renders a pods selector pair; an empty namespace
// selector is every namespace.
func namespacedPod(p *anpv1.NamespacedPod, field string) (sel, nsSel string, err error) {
	if nsSel, err = selector(&p.NamespaceSelector, selectNamespaces); err != nil {
		return "", "", fmt.Errorf("%s.namespaceSelector: %w", field, err)
	}
	if sel, err = selector(&p.PodSelector, selectPods); err != nil {
		return "", "", fmt.Errorf("%s.podSelector: %w", field, err)
	}
	return sel, nsSel, nil
}

// adminRules converts one direction's rules, in order.
func adminRules(dir string, rules []adminRule, ingress, passAllowed bool, nodes NodeAddresses, problems AdminProblems) ([]v3.Rule, AdminProblems) {
	var out []v3.Rule
	for i, r := range rules {
		where := fmt.Sprintf("%s[%d]", dir, i)
		if r.name != "" {
			where += fmt.Sprintf(" %q", r.name)
		}
		var meta *v3.RuleMetadata
		if r.name != "" {
			meta = &v3.RuleMetadata{Annotations: map[string]string{AdminRuleNameAnnotation: r.name}}
		}
		action, aerr := adminAction(r.action, passAllowed)
		allow := action == v3.Allow
		failed := func(err error) {
			p := AdminProblem{Rule: where, Err: err, Enforced: "omitted"}
			if !allow {
				p.Enforced = "deny"
			}
			problems = append(problems, p)
		}
		if aerr != nil {
			failed(aerr)
		}
		widened := aerr != nil
		byProto, perr := adminPorts(r.ports)
		if perr != nil {
			failed(perr)
			if allow {
				continue
			}
			byProto, widened = map[string][]numorstring.Port{"": nil}, true
		}
		// Each peer, as the entities it matches; a nil list is a peer
		// that matches nothing (nodes no node has).
		var ents []v3.EntityRule
		var denyAll bool
		for j, p := range r.peers {
			es, err := adminEntities(p, nodes)
			if err != nil {
				failed(fmt.Errorf("peer %d: %w", j, err))
				if !allow {
					denyAll = true
				}
				continue
			}
			ents = append(ents, es...)
		}
		if denyAll {
			// A Deny or Pass that cannot name what it matches: deny
			// everyone on its ports.
			ents = []v3.EntityRule{{}}
		}
		if widened || denyAll {
			action = v3.Deny
		}
		for _, proto := range slices.Sorted(maps.Keys(byProto)) {
			var protocol *numorstring.Protocol
			if proto != "" {
				pr := numorstring.ProtocolFromString(proto)
				protocol = &pr
			}
			for _, ent := range ents {
				rule := v3.Rule{Action: action, Protocol: protocol, Metadata: meta}
				if ingress {
					rule.Source = ent
				} else {
					rule.Destination = ent
				}
				rule.Destination.Ports = byProto[proto]
				out = append(out, rule)
			}
		}
	}
	return out, problems
}

// adminAction maps the rule's action; an action Palisade does not know
// is an error (its rule is enforced as Deny).
func adminAction(a string, passAllowed bool) (v3.Action, error) {
	switch a {
	case string(anpv1.AdminNetworkPolicyRuleActionAllow):
		return v3.Allow, nil
	case string(anpv1.AdminNetworkPolicyRuleActionDeny):
		return v3.Deny, nil
	case string(anpv1.AdminNetworkPolicyRuleActionPass):
		if passAllowed {
			return v3.Pass, nil
		}
	}
	return v3.Deny, fmt.Errorf("action %q is not one the API allows here", a)
}

// namedPortProtocols are the protocols a named port is matched on: the
// API names no protocol for it, so it matches whichever the pod declares.
var namedPortProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// adminPorts groups a rule's ports by protocol (TCP when a port names
// none); nil ports is every port of every protocol (key "").
func adminPorts(ports *[]anpv1.AdminNetworkPolicyPort) (map[string][]numorstring.Port, error) {
	if ports == nil || len(*ports) == 0 {
		return map[string][]numorstring.Port{"": nil}, nil
	}
	out := map[string][]numorstring.Port{}
	protoOf := func(p corev1.Protocol) (string, error) {
		switch p {
		case "":
			return string(corev1.ProtocolTCP), nil
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			return string(p), nil
		}
		return "", fmt.Errorf("protocol %q is not TCP, UDP or SCTP", p)
	}
	for i, p := range *ports {
		set := 0
		if p.PortNumber != nil {
			set++
			proto, err := protoOf(p.PortNumber.Protocol)
			if err != nil {
				return nil, fmt.Errorf("ports[%d].portNumber: %w", i, err)
			}
			if p.PortNumber.Port < 1 || p.PortNumber.Port > 65535 {
				return nil, fmt.Errorf("ports[%d].portNumber: port %d is not in 1-65535", i, p.PortNumber.Port)
			}
			out[proto] = append(out[proto], numorstring.SinglePort(uint16(p.PortNumber.Port)))
		}
		if p.PortRange != nil {
			set++
			proto, err := protoOf(p.PortRange.Protocol)
			if err != nil {
				return nil, fmt.Errorf("ports[%d].portRange: %w", i, err)
			}
			lo, hi := p.PortRange.Start, p.PortRange.End
			if lo < 1 || hi > 65535 || lo > hi {
				return nil, fmt.Errorf("ports[%d].portRange: %d-%d is not a range within 1-65535", i, lo, hi)
			}
			out[proto] = append(out[proto], numorstring.Port{MinPort: uint16(lo), MaxPort: uint16(hi)})
		}
		if p.NamedPort != nil {
			set++
			np := numorstring.NamedPort(*p.NamedPort)
			if err := np.Validate(); err != nil {
				return nil, fmt.Errorf("ports[%d].namedPort: %w", i, err)
			}
			for _, proto := range namedPortProtocols {
				out[string(proto)] = append(out[string(proto)], np)
			}
		}
		if set != 1 {
			return nil, fmt.Errorf("ports[%d]: %d of portNumber, namedPort and portRange set, want exactly one", i, set)
		}
	}
	for proto, ps := range out {
		out[proto] = simplifyPorts(ps)
	}
	return out, nil
}

// adminEntities renders one peer as the entities it matches (one, except
// a nodes peer matching no node: none). Exactly one field must be set.
func adminEntities(p adminPeer, nodes NodeAddresses) ([]v3.EntityRule, error) {
	set := 0
	for _, b := range []bool{p.namespaces != nil, p.pods != nil, p.nodes != nil, p.networks != nil, p.domainNames != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("%d of namespaces, pods, nodes, networks and domainNames set, want exactly one", set)
	}
	switch {
	case p.namespaces != nil:
		nsSel, err := selector(p.namespaces, selectNamespaces)
		if err != nil {
			return nil, fmt.Errorf("namespaces: %w", err)
		}
		return []v3.EntityRule{{NamespaceSelector: nsSel}}, nil
	case p.pods != nil:
		sel, nsSel, err := namespacedPod(p.pods, "pods")
		if err != nil {
			return nil, err
		}
		return []v3.EntityRule{{Selector: sel, NamespaceSelector: nsSel}}, nil
	case p.networks != nil:
		if len(p.networks) == 0 {
			return nil, errors.New("networks: empty")
		}
		nets := make([]string, 0, len(p.networks))
		for _, n := range p.networks {
			c, err := canonicalCIDR(string(n))
			if err != nil {
				return nil, fmt.Errorf("networks: %w", err)
			}
			nets = append(nets, c)
		}
		return netEntities(nets), nil
	case p.nodes != nil:
		if nodes == nil {
			return nil, errors.New("nodes: no node addresses known")
		}
		ls, err := metav1.LabelSelectorAsSelector(p.nodes)
		if err != nil {
			return nil, fmt.Errorf("nodes: %w", err)
		}
		return netEntities(nodes(ls)), nil
	}
	return nil, errors.New("domainNames: Palisade cannot match domain names (Calico does not either)")
}

// netEntities splits CIDRs by family, IPv4 first, into one entity each (a
// Calico rule holds one family); none gives no entity.
func netEntities(cidrs []string) []v3.EntityRule {
	var v4, v6 []string
	for _, c := range cidrs {
		if strings.Contains(c, ":") {
			v6 = append(v6, c)
		} else {
			v4 = append(v4, c)
		}
	}
	var out []v3.EntityRule
	for _, nets := range [][]string{v4, v6} {
		if len(nets) > 0 {
			out = append(out, v3.EntityRule{Nets: nets})
		}
	}
	return out
}
