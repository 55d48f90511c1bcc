package k8s

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// PodLabels are the labels of a pod's WorkloadEndpoint: the pod's own,
// then Calico's, which win over a pod label of the same key:
// projectcalico.org/namespace, projectcalico.org/orchestrator: k8s and,
// when the pod names one, projectcalico.org/serviceaccount.
func PodLabels(pod *corev1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[LabelNamespace] = pod.Namespace
	labels[LabelOrchestrator] = OrchestratorKubernetes
	if sa := pod.Spec.ServiceAccountName; sa != "" {
		labels[LabelServiceAccount] = sa
	}
	return labels
}

// PodProfiles are the profiles of a pod's WorkloadEndpoint: its
// namespace's, then its service account's when it names one.
func PodProfiles(pod *corev1.Pod) []string {
	profiles := []string{NamespaceProfileName(pod.Namespace)}
	if sa := pod.Spec.ServiceAccountName; sa != "" {
		profiles = append(profiles, ServiceAccountProfileName(pod.Namespace, sa))
	}
	return profiles
}

// PodPorts are the named ports a pod's WorkloadEndpoint declares: every
// container port with a number and a name, in container order, as Calico
// lists them (init containers' ports are not listed). Calico also lists
// unnamed ports that have a host port; Palisade does not, as it does not
// implement host ports and a WorkloadEndpoint port needs a name.
// A protocol Kubernetes leaves unset is TCP.
func PodPorts(pod *corev1.Pod) []v3.WorkloadEndpointPort {
	var out []v3.WorkloadEndpointPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort <= 0 || p.ContainerPort > 65535 || p.Name == "" {
				continue
			}
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			out = append(out, v3.WorkloadEndpointPort{
				Name: p.Name, Protocol: numorstring.ProtocolFromString(proto),
				Port: uint16(p.ContainerPort), HostPort: uint16(max(0, min(p.HostPort, 65535))), HostIP: p.HostIP,
			})
		}
	}
	return out
}
