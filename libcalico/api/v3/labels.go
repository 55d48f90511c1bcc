package v3

// Labels Calico adds to resources when they are written.
const (
	// LabelTier names the tier of a policy.
	LabelTier = "projectcalico.org/tier"
	// LabelNamespace names the namespace of a WorkloadEndpoint.
	LabelNamespace = "projectcalico.org/namespace"
	// LabelOrchestrator names the orchestrator of a WorkloadEndpoint.
	LabelOrchestrator = "projectcalico.org/orchestrator"
)

// setLabel sets one label, creating the map when needed.
func setLabel(m *ObjectMeta, key, value string) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[key] = value
}
