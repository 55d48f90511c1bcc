package names

import "strings"

// Orchestrator names, as they appear in WorkloadEndpoint names and in the
// projectcalico.org/orchestrator label.
const (
	OrchestratorKubernetes = "k8s"
	OrchestratorCNI        = "cni"
)

// WorkloadEndpointName is the name of a WorkloadEndpoint resource:
// "<node>-<orchestrator>-<workload>-<iface>" where every "-" inside a part is
// doubled, so the name splits back unambiguously. For a Kubernetes pod the
// workload is the pod name ("node1-k8s-nginx--1-eth0").
func WorkloadEndpointName(node, orchestrator, workload, iface string) string {
	parts := []string{node, orchestrator, workload, iface}
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, "-", "--")
	}
	return strings.Join(parts, "-")
}
