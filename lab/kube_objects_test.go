package lab

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func (s *ksel) object() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	ls := &metav1.LabelSelector{MatchLabels: s.match}
	for _, e := range s.exprs {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.key,
			Operator: metav1.LabelSelectorOperator(e.op), Values: e.values})
	}
	return ls
}

func peersOf(ps []kpeer) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for _, p := range ps {
		if p.cidr != "" {
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.cidr, Except: p.except}})
			continue
		}
		out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: p.pods.object(), NamespaceSelector: p.namespaces.object()})
	}
	return out
}

func portsOf(ps []kport) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range ps {
		np := networkingv1.NetworkPolicyPort{}
		if p.proto != "" {
			proto := corev1.Protocol(p.proto)
			np.Protocol = &proto
		}
		switch {
		case p.name != "":
			v := intstr.FromString(p.name)
			np.Port = &v
		case p.num != 0:
			v := intstr.FromInt32(int32(p.num))
			np.Port = &v
			if p.end != 0 {
				e := int32(p.end)
				np.EndPort = &e
			}
		}
		out = append(out, np)
	}
	return out
}
