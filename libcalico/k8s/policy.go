package k8s

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// NetworkPolicy converts a Kubernetes NetworkPolicy into the Calico
// NetworkPolicy Calico writes for it: knp.default.<name> in the same
// namespace, order 1000 in the default tier, the podSelector as a
// selector restricted to Kubernetes pods, the policy types Kubernetes
// implies, and one Allow rule per protocol and peer of each rule.
//
// A policy Kubernetes would not have accepted (a bad CIDR, selector or
// port) fails closed: the error says what is wrong, and the policy
// returned with it applies, in the directions the original did, to every
// pod of its namespace and allows nothing, so what cannot be enforced
// never turns into something wider.
func NetworkPolicy(np *networkingv1.NetworkPolicy) (*v3.NetworkPolicy, error) {
	order := PolicyOrder
	out := &v3.NetworkPolicy{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: PolicyName(np.Name), Namespace: np.Namespace},
		Spec:       v3.NetworkPolicySpec{Tier: v3.DefaultTierName, Order: &order},
	}
	ingress, egress := policyTypes(np)
	if ingress {
		out.Spec.Types = append(out.Spec.Types, v3.PolicyTypeIngress)
	}
	if egress {
		out.Spec.Types = append(out.Spec.Types, v3.PolicyTypeEgress)
	}
	err := func() error {
		sel, err := selector(&np.Spec.PodSelector, selectPods)
		if err != nil {
			return fmt.Errorf("podSelector: %w", err)
		}
		out.Spec.Selector = sel
		if ingress {
			for i, r := range np.Spec.Ingress {
				rules, err := convertRule(r.From, r.Ports, true)
				if err != nil {
					return fmt.Errorf("ingress[%d]: %w", i, err)
				}
				out.Spec.Ingress = append(out.Spec.Ingress, rules...)
			}
		}
		if egress {
			for i, r := range np.Spec.Egress {
				rules, err := convertRule(r.To, r.Ports, false)
				if err != nil {
					return fmt.Errorf("egress[%d]: %w", i, err)
				}
				out.Spec.Egress = append(out.Spec.Egress, rules...)
			}
		}
		return nil
	}()
	if err != nil {
		out.Spec.Selector = orchestratorSelector
		out.Spec.Ingress, out.Spec.Egress = nil, nil
		return out, fmt.Errorf("networkpolicy %s/%s: %w (enforced as deny-all for the namespace's pods)", np.Namespace, np.Name, err)
	}
	return out, nil
}

// policyTypes are the directions the policy applies to: its policyTypes,
// or when it lists none, Ingress, and Egress too when it has egress
// rules (the Kubernetes default).
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	if !ingress && !egress {
		ingress = true
		egress = len(np.Spec.Egress) > 0
	}
	return ingress, egress
}

// convertRule turns one ingress (from) or egress (to) rule into Calico
// rules: its ports grouped by protocol (a port without a number opens
// the whole protocol; a port without anything, every protocol), then for
// each protocol, in name order, one rule per peer. A missing or empty
// peer list matches everyone; a missing or empty port list every port.
func convertRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, ingress bool) ([]v3.Rule, error) {
	byProto, err := protocolPorts(ports)
	if err != nil {
		return nil, err
	}
	peerList := make([]*networkingv1.NetworkPolicyPeer, 0, len(peers))
	for i := range peers {
		peerList = append(peerList, &peers[i])
	}
	if len(peerList) == 0 {
		peerList = []*networkingv1.NetworkPolicyPeer{nil}
	}
	var rules []v3.Rule
	for _, proto := range slices.Sorted(maps.Keys(byProto)) {
		calicoPorts := simplifyPorts(byProto[proto])
		var protocol *numorstring.Protocol
		if proto != "" {
			p := numorstring.ProtocolFromString(proto)
			protocol = &p
		}
		for i, peer := range peerList {
			ent, err := convertPeer(peer)
			if err != nil {
				return nil, fmt.Errorf("peer %d: %w", i, err)
			}
			r := v3.Rule{Action: v3.Allow, Protocol: protocol}
			if ingress {
				r.Source = ent
				r.Destination.Ports = calicoPorts
			} else {
				r.Destination = ent
				r.Destination.Ports = calicoPorts
			}
			rules = append(rules, r)
		}
	}
	return rules, nil
}

// protocolPorts groups the rule's ports by protocol name; a nil slice
// means every port of that protocol, and the key "" every protocol.
func protocolPorts(ports []networkingv1.NetworkPolicyPort) (map[string][]numorstring.Port, error) {
	out := map[string][]numorstring.Port{}
	if len(ports) == 0 {
		out[""] = nil
		return out, nil
	}
	for i, p := range ports {
		proto, cps, err := convertPort(p)
		if err != nil {
			return nil, fmt.Errorf("ports[%d]: %w", i, err)
		}
		if proto == "" && cps == nil {
			// No protocol and no port: everything, which no other port
			// can narrow.
			return map[string][]numorstring.Port{"": nil}, nil
		}
		prev, seen := out[proto]
		switch {
		case cps == nil:
			out[proto] = nil // the whole protocol
		case !seen || len(prev) > 0:
			out[proto] = append(prev, cps...)
		}
	}
	return out, nil
}

// convertPort reads one NetworkPolicyPort: its protocol ("" when unset,
// which the API server never leaves it) and its port, range or name (nil
// for every port).
func convertPort(p networkingv1.NetworkPolicyPort) (string, []numorstring.Port, error) {
	proto := ""
	if p.Protocol != nil {
		switch *p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			proto = string(*p.Protocol)
		default:
			return "", nil, fmt.Errorf("protocol %q is not TCP, UDP or SCTP", *p.Protocol)
		}
	}
	if p.Port == nil {
		if p.EndPort != nil {
			return "", nil, errors.New("endPort without port")
		}
		return proto, nil, nil
	}
	if p.Port.Type == intstr.String {
		if p.EndPort != nil {
			return "", nil, fmt.Errorf("endPort %d with the named port %q", *p.EndPort, p.Port.StrVal)
		}
		np := numorstring.NamedPort(p.Port.StrVal)
		if err := np.Validate(); err != nil {
			return "", nil, err
		}
		return proto, []numorstring.Port{np}, nil
	}
	lo := p.Port.IntVal
	if lo < 1 || lo > 65535 {
		return "", nil, fmt.Errorf("port %d is not in 1-65535", lo)
	}
	hi := lo
	if p.EndPort != nil {
		hi = *p.EndPort
		if hi < lo || hi > 65535 {
			return "", nil, fmt.Errorf("endPort %d is not in %d-65535", hi, lo)
		}
	}
	return proto, []numorstring.Port{{MinPort: uint16(lo), MaxPort: uint16(hi)}}, nil
}

// simplifyPorts puts named ports first, as given, then the numeric ports
// sorted with overlapping and adjacent ranges merged.
func simplifyPorts(ports []numorstring.Port) []numorstring.Port {
	if len(ports) <= 1 {
		return ports
	}
	var named, numeric []numorstring.Port
	for _, p := range ports {
		if p.PortName != "" {
			named = append(named, p)
		} else {
			numeric = append(numeric, p)
		}
	}
	slices.SortStableFunc(numeric, func(a, b numorstring.Port) int {
		if a.MinPort != b.MinPort {
			return int(a.MinPort) - int(b.MinPort)
		}
		return int(a.MaxPort) - int(b.MaxPort)
	})
	out := named
	for _, p := range numeric {
		if n := len(out); n > 0 && out[n-1].PortName == "" && int(p.MinPort) <= int(out[n-1].MaxPort)+1 {
			out[n-1].MaxPort = max(out[n-1].MaxPort, p.MaxPort)
			continue
		}
		out = append(out, p)
	}
	return out
}

// convertPeer renders one peer as the entity it matches: an ipBlock as
// nets and notNets, otherwise a pod selector (Kubernetes pods only)
// within the namespaces the namespace selector picks ("" for the
// policy's own). A nil peer matches everything.
func convertPeer(peer *networkingv1.NetworkPolicyPeer) (v3.EntityRule, error) {
	var ent v3.EntityRule
	if peer == nil {
		return ent, nil
	}
	if peer.IPBlock != nil {
		if peer.PodSelector != nil || peer.NamespaceSelector != nil {
			return ent, errors.New("ipBlock together with a selector")
		}
		cidr, err := canonicalCIDR(peer.IPBlock.CIDR)
		if err != nil {
			return ent, fmt.Errorf("ipBlock.cidr: %w", err)
		}
		ent.Nets = []string{cidr}
		for _, e := range peer.IPBlock.Except {
			c, err := canonicalCIDR(e)
			if err != nil {
				return ent, fmt.Errorf("ipBlock.except: %w", err)
			}
			ent.NotNets = append(ent.NotNets, c)
		}
		return ent, nil
	}
	var err error
	if ent.Selector, err = selector(peer.PodSelector, selectPods); err != nil {
		return ent, fmt.Errorf("podSelector: %w", err)
	}
	if ent.NamespaceSelector, err = selector(peer.NamespaceSelector, selectNamespaces); err != nil {
		return ent, fmt.Errorf("namespaceSelector: %w", err)
	}
	return ent, nil
}

// canonicalCIDR parses a CIDR and returns its network ("10.0.0.1/24"
// becomes "10.0.0.0/24"), as Calico stores it.
func canonicalCIDR(s string) (string, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a CIDR", s)
	}
	return p.Masked().String(), nil
}
