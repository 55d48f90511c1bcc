package v3

import (
	"fmt"
	"reflect"

	"github.com/palisade-net/palisade/libcalico/names"
)

// enforcedNetworkPolicySpec is the NetworkPolicySpec a staged policy
// stands for.
func (s *StagedNetworkPolicySpec) enforced() NetworkPolicySpec {
	return NetworkPolicySpec{Tier: s.Tier, Order: s.Order, Ingress: s.Ingress, Egress: s.Egress, Selector: s.Selector,
		Types: s.Types, ServiceAccountSelector: s.ServiceAccountSelector, PerformanceHints: s.PerformanceHints}
}

func (s *StagedGlobalNetworkPolicySpec) enforced() GlobalNetworkPolicySpec {
	return GlobalNetworkPolicySpec{Tier: s.Tier, Order: s.Order, Ingress: s.Ingress, Egress: s.Egress, Selector: s.Selector,
		Types: s.Types, DoNotTrack: s.DoNotTrack, PreDNAT: s.PreDNAT, ApplyOnForward: s.ApplyOnForward,
		ServiceAccountSelector: s.ServiceAccountSelector, NamespaceSelector: s.NamespaceSelector, PerformanceHints: s.PerformanceHints}
}

func (v *validator) stagedAction(a StagedAction) {
	v.enum("spec.stagedAction", string(a), string(StagedActionSet), string(StagedActionDelete))
}

func (v *validator) stagedNetworkPolicy(s *StagedNetworkPolicySpec) {
	v.stagedAction(s.StagedAction)
	e := s.enforced()
	if s.StagedAction == StagedActionDelete {
		if !reflect.DeepEqual(e, NetworkPolicySpec{Tier: e.Tier, Types: e.Types}) {
			v.fail("spec", nil, "Spec fields, except Tier, should all be zero-value if stagedAction is Delete")
		}
		return
	}
	v.networkPolicy(&e)
}

func (v *validator) stagedGlobalNetworkPolicy(s *StagedGlobalNetworkPolicySpec) {
	v.stagedAction(s.StagedAction)
	e := s.enforced()
	if s.StagedAction == StagedActionDelete {
		if !reflect.DeepEqual(e, GlobalNetworkPolicySpec{Tier: e.Tier, Types: e.Types}) {
			v.fail("spec", nil, "Spec fields, except Tier, should all be zero-value if stagedAction is Delete")
		}
		return
	}
	v.globalNetworkPolicy(&e)
}

func (v *validator) stagedKubernetesNetworkPolicy(s *StagedKubernetesNetworkPolicySpec) {
	v.stagedAction(s.StagedAction)
	if s.StagedAction == StagedActionDelete {
		if !reflect.DeepEqual(*s, StagedKubernetesNetworkPolicySpec{StagedAction: StagedActionDelete}) {
			v.fail("spec", nil, "Spec fields should all be zero-value if stagedAction is Delete")
		}
		return
	}
	v.k8sSelector("spec.podSelector", &s.PodSelector)
	for i, t := range s.PolicyTypes {
		v.enum(fmt.Sprintf("spec.policyTypes[%d]", i), string(t), string(PolicyTypeIngress), string(PolicyTypeEgress))
	}
	peers := func(f string, ps []K8sNetworkPolicyPeer, ports []K8sNetworkPolicyPort) {
		for i, p := range ps {
			pf := fmt.Sprintf("%s[%d]", f, i)
			v.k8sSelector(pf+".podSelector", p.PodSelector)
			v.k8sSelector(pf+".namespaceSelector", p.NamespaceSelector)
			if b := p.IPBlock; b != nil {
				if _, ok := parseCIDROrIP(b.CIDR); !ok {
					v.fail(pf+".ipBlock.cidr", b.CIDR, "invalid CIDR")
				}
				for j, e := range b.Except {
					if _, ok := parseCIDROrIP(e); !ok {
						v.fail(fmt.Sprintf("%s.ipBlock.except[%d]", pf, j), e, "invalid CIDR")
					}
				}
			}
		}
		_ = ports
	}
	for i, r := range s.Ingress {
		peers(fmt.Sprintf("spec.ingress[%d].from", i), r.From, r.Ports)
		v.k8sPorts(fmt.Sprintf("spec.ingress[%d].ports", i), r.Ports)
	}
	for i, r := range s.Egress {
		peers(fmt.Sprintf("spec.egress[%d].to", i), r.To, r.Ports)
		v.k8sPorts(fmt.Sprintf("spec.egress[%d].ports", i), r.Ports)
	}
}

func (v *validator) k8sSelector(f string, s *K8sLabelSelector) {
	if s == nil {
		return
	}
	for k, val := range s.MatchLabels {
		if msg := labelKeyProblem(k); msg != "" {
			v.fail(f+".matchLabels", k, "invalid label key: %s", msg)
		}
		if val != "" && (len(val) > 63 || !labelNameRE().MatchString(val)) {
			v.fail(f+".matchLabels."+k, val, "invalid label value")
		}
	}
	for i, e := range s.MatchExpressions {
		v.enum(fmt.Sprintf("%s.matchExpressions[%d].operator", f, i), e.Operator, "In", "NotIn", "Exists", "DoesNotExist")
	}
}

func (v *validator) k8sPorts(f string, ports []K8sNetworkPolicyPort) {
	for i, p := range ports {
		if p.Protocol != nil {
			v.enum(fmt.Sprintf("%s[%d].protocol", f, i), *p.Protocol, "TCP", "UDP", "SCTP")
		}
		if p.Port != nil && !p.Port.IsStr && (p.Port.IntVal < 1 || p.Port.IntVal > 65535) {
			v.fail(fmt.Sprintf("%s[%d].port", f, i), p.Port.IntVal, "must be between 1 and 65535, inclusive")
		}
	}
}

// networkSet checks a (global) network set: valid networks (host bits
// allowed, as in Calico) and none of Calico's reserved namespace label.
func (v *validator) networkSet(labels map[string]string, nets []string) {
	for k := range labels {
		if k == LabelNamespace {
			v.fail("metadata.labels", k, "projectcalico.org/namespace is not a valid label name")
		}
	}
	for i, n := range nets {
		if _, ok := parseCIDROrIP(n); !ok {
			v.fail(fmt.Sprintf("spec.nets[%d]", i), n, "invalid CIDR")
		}
	}
}

// workloadEndpointName checks that a WorkloadEndpoint's name is the one its
// node, orchestrator, workload (pod) and endpoint give it, as Calico does.
func (v *validator) workloadEndpointName(w *WorkloadEndpoint) {
	s := &w.Spec
	workload := s.Workload
	if s.Orchestrator == names.OrchestratorKubernetes {
		workload = s.Pod
	}
	if s.Node == "" || s.Orchestrator == "" || workload == "" || s.Endpoint == "" {
		return
	}
	if want := names.WorkloadEndpointName(s.Node, s.Orchestrator, workload, s.Endpoint); w.Name != want {
		v.fail("metadata.name", w.Name, "the WorkloadEndpoint name does not match the primary identifiers assigned in the Spec: expected name %s", want)
	}
}
