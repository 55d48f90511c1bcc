package k8s

import "strings"

// Name prefixes of the resources derived from Kubernetes objects, as
// Calico names them.
const (
	// PolicyNamePrefix prefixes the Calico NetworkPolicy of a Kubernetes
	// NetworkPolicy (the default tier's knp.default.<name>).
	PolicyNamePrefix = "knp.default."
	// NamespaceProfilePrefix prefixes a namespace's Profile.
	NamespaceProfilePrefix = "kns."
	// ServiceAccountProfilePrefix prefixes a service account's Profile.
	ServiceAccountProfilePrefix = "ksa."
)

// Label prefixes and names Calico adds.
const (
	// NamespaceLabelPrefix prefixes a namespace's labels in its Profile's
	// labelsToApply; a rule's namespaceSelector matches them.
	NamespaceLabelPrefix = "pcns."
	// ServiceAccountLabelPrefix prefixes a service account's labels in its
	// Profile's labelsToApply; serviceAccountSelector matches them.
	ServiceAccountLabelPrefix = "pcsa."
	// NameLabel carries the namespace's or service account's own name
	// (after the prefix), so selectors can match it.
	NameLabel = "projectcalico.org/name"
	// LabelNamespace, LabelOrchestrator and LabelServiceAccount are set on
	// every WorkloadEndpoint of a pod.
	LabelNamespace      = "projectcalico.org/namespace"
	LabelOrchestrator   = "projectcalico.org/orchestrator"
	LabelServiceAccount = "projectcalico.org/serviceaccount"
	// OrchestratorKubernetes is LabelOrchestrator's value for pods.
	OrchestratorKubernetes = "k8s"
)

// PolicyOrder is the order of every converted NetworkPolicy.
const PolicyOrder = 1000.0

// PolicyName is the Calico name of the Kubernetes NetworkPolicy name.
func PolicyName(name string) string { return PolicyNamePrefix + name }

// IsPolicyName says whether a Calico NetworkPolicy name is a converted
// Kubernetes one, and gives the Kubernetes name.
func IsPolicyName(name string) (string, bool) {
	return strings.CutPrefix(name, PolicyNamePrefix)
}

// NamespaceProfileName is the Profile of a namespace.
func NamespaceProfileName(namespace string) string { return NamespaceProfilePrefix + namespace }

// ServiceAccountProfileName is the Profile of a service account.
func ServiceAccountProfileName(namespace, name string) string {
	return ServiceAccountProfilePrefix + namespace + "." + name
}

// ParseServiceAccountProfileName splits "ksa.<namespace>.<name>"; a
// namespace holds no dot, so the first dot after the prefix ends it.
func ParseServiceAccountProfileName(profile string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(profile, ServiceAccountProfilePrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ".")
	return namespace, name, ok && namespace != "" && name != ""
}
