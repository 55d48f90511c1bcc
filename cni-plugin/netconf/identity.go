package netconf

import (
	"fmt"
	"strings"

	"github.com/palisade-net/palisade/libcalico/names"
)

// DefaultNamespace holds the endpoints of workloads not run by Kubernetes.
const DefaultNamespace = "default"

// Workload identifies the endpoint an invocation is about.
type Workload struct {
	// Orchestrator is "k8s" when CNI_ARGS name a pod, else "cni".
	Orchestrator string
	// Namespace is the pod's namespace, or "default".
	Namespace string
	// Name is the pod name, or the container ID outside Kubernetes.
	Name string
	// ContainerID is the sandbox being set up (CNI_CONTAINERID).
	ContainerID string
	// Endpoint is the interface inside the workload (CNI_IFNAME).
	Endpoint string
	// Node is the node the workload runs on.
	Node string
}

// IdentifyWorkload reads K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS
// ("K=V;K=V"; unknown keys are ignored, as runtimes add their own). Each
// pair must be one key, "=" and one value, as the CNI library reads them
// (types.LoadArgs); anything else is an error naming the pair. The
// container ID is CNI_CONTAINERID, which under Kubernetes equals
// K8S_POD_INFRA_CONTAINER_ID.
func IdentifyWorkload(cniArgs, containerID, ifName, node string) (Workload, error) {
	kv := map[string]string{}
	if cniArgs != "" {
		for _, pair := range strings.Split(cniArgs, ";") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || strings.TrimSpace(k) == "" || strings.Contains(v, "=") {
				return Workload{}, fmt.Errorf("CNI_ARGS %q: pair %q is not KEY=VALUE", cniArgs, pair)
			}
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	w := Workload{Orchestrator: names.OrchestratorCNI, Namespace: DefaultNamespace, Name: containerID,
		ContainerID: containerID, Endpoint: ifName, Node: node}
	if ns, pod := kv["K8S_POD_NAMESPACE"], kv["K8S_POD_NAME"]; ns != "" && pod != "" {
		w.Orchestrator, w.Namespace, w.Name = names.OrchestratorKubernetes, ns, pod
	}
	return w, nil
}

// IsKubernetes reports whether the workload is a pod.
func (w Workload) IsKubernetes() bool { return w.Orchestrator == names.OrchestratorKubernetes }

// EndpointName is the WorkloadEndpoint's resource name.
func (w Workload) EndpointName() string {
	return names.WorkloadEndpointName(w.Node, w.Orchestrator, w.Name, w.Endpoint)
}

// HostVethName is the host side of the workload's veth.
func (w Workload) HostVethName() string {
	if w.IsKubernetes() {
		return names.VethNameForWorkload(w.Namespace, w.Name)
	}
	return names.VethNameForContainer(w.ContainerID)
}

// HandleID is the IPAM handle of the workload's addresses on network:
// "<network>.<containerID>", i.e. "k8s-pod-network.<containerID>" for
// Calico's usual network name.
func HandleID(network, containerID string) string {
	return network + "." + containerID
}
