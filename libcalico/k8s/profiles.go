package k8s

import (
	corev1 "k8s.io/api/core/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// NamespaceProfile is the Profile kns.<namespace> Calico keeps for a
// namespace: rules allowing all traffic both ways (what a pod no policy
// selects gets) and the namespace's labels, under pcns., to apply to its
// endpoints, with pcns.projectcalico.org/name naming it (the API server
// also sets kubernetes.io/metadata.name, which comes through as
// pcns.kubernetes.io/metadata.name).
func NamespaceProfile(ns *corev1.Namespace) *v3.Profile {
	labels := make(map[string]string, len(ns.Labels)+1)
	for k, v := range ns.Labels {
		labels[NamespaceLabelPrefix+k] = v
	}
	labels[NamespaceLabelPrefix+NameLabel] = ns.Name
	return &v3.Profile{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: NamespaceProfileName(ns.Name)},
		Spec: v3.ProfileSpec{
			Ingress:       []v3.Rule{{Action: v3.Allow}},
			Egress:        []v3.Rule{{Action: v3.Allow}},
			LabelsToApply: labels,
		},
	}
}

// ServiceAccountProfile is the Profile ksa.<namespace>.<name> Calico keeps
// for a service account: no rules, only the account's labels under pcsa.,
// with pcsa.projectcalico.org/name naming it.
func ServiceAccountProfile(sa *corev1.ServiceAccount) *v3.Profile {
	labels := make(map[string]string, len(sa.Labels)+1)
	for k, v := range sa.Labels {
		labels[ServiceAccountLabelPrefix+k] = v
	}
	labels[ServiceAccountLabelPrefix+NameLabel] = sa.Name
	return &v3.Profile{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: ServiceAccountProfileName(sa.Namespace, sa.Name)},
		Spec:       v3.ProfileSpec{LabelsToApply: labels},
	}
}
