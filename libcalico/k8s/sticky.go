package k8s

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Release-policy annotations: Palisade's, and Galaxy's name for the same
// thing, accepted as an alias.
const (
	AnnotationIPReleasePolicy       = "cni.projectcalico.org/ipReleasePolicy"
	AnnotationGalaxyIPReleasePolicy = "k8s.v1.cni.galaxy.io/release-policy"
)

// ReleasePolicy says when a pod's address is given back.
type ReleasePolicy string

// Release policies, with Galaxy's values.
const (
	// ReleaseOnStop (empty) releases the address when the pod stops.
	ReleaseOnStop ReleasePolicy = ""
	// ReleaseImmutable keeps the address for the pod's name within its
	// StatefulSet until the StatefulSet is deleted or scaled down past it.
	ReleaseImmutable ReleasePolicy = "immutable"
	// ReleaseNever keeps the address even after the StatefulSet is
	// deleted: a later StatefulSet of the same name reuses it.
	ReleaseNever ReleasePolicy = "never"
)

// StickyOwner is the workload a sticky address belongs to.
type StickyOwner struct {
	Kind, Name, UID string
	// Ordinal is the pod's ordinal in its StatefulSet.
	Ordinal int
}

// PodReleasePolicy reads the pod's release policy from
// cni.projectcalico.org/ipReleasePolicy or Galaxy's
// k8s.v1.cni.galaxy.io/release-policy; both set must agree.
func PodReleasePolicy(pod *corev1.Pod) (ReleasePolicy, error) {
	p, hasP := pod.Annotations[AnnotationIPReleasePolicy]
	g, hasG := pod.Annotations[AnnotationGalaxyIPReleasePolicy]
	if hasP && hasG && p != g {
		return "", fmt.Errorf("annotations %s %q and %s %q disagree", AnnotationIPReleasePolicy, p, AnnotationGalaxyIPReleasePolicy, g)
	}
	key, v := AnnotationIPReleasePolicy, p
	if !hasP {
		key, v = AnnotationGalaxyIPReleasePolicy, g
	}
	switch rp := ReleasePolicy(strings.TrimSpace(v)); rp {
	case ReleaseOnStop, ReleaseImmutable, ReleaseNever:
		return rp, nil
	default:
		return "", fmt.Errorf("annotation %s %q: want one of \"\" (release when the pod stops), \"immutable\" or \"never\"", key, v)
	}
}

// PodStickyOwner returns the StatefulSet a pod with a sticky release
// policy belongs to (its controller ownerReference). Pods of other
// workloads cannot keep an address by name: Deployments' pods get a new
// name each time, and Palisade does not implement Galaxy's per-Deployment
// address pools; such a pod is refused.
func PodStickyOwner(pod *corev1.Pod) (StickyOwner, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return StickyOwner{}, fmt.Errorf("a sticky address (ipReleasePolicy) needs a pod owned by a StatefulSet; pod %s/%s has no controller", pod.Namespace, pod.Name)
	}
	if ref.Kind != "StatefulSet" || !strings.HasPrefix(ref.APIVersion, "apps/") {
		return StickyOwner{}, fmt.Errorf("a sticky address (ipReleasePolicy) needs a pod owned by a StatefulSet; pod %s/%s is owned by %s %s (not implemented in Palisade)",
			pod.Namespace, pod.Name, ref.Kind, ref.Name)
	}
	ord, ok := StatefulSetOrdinal(ref.Name, pod.Name)
	if !ok {
		return StickyOwner{}, fmt.Errorf("pod %s/%s of StatefulSet %s: name is not <statefulset>-<ordinal>", pod.Namespace, pod.Name, ref.Name)
	}
	return StickyOwner{Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID), Ordinal: ord}, nil
}

// StatefulSetOrdinal is the ordinal of pod name in StatefulSet set.
func StatefulSetOrdinal(set, pod string) (int, bool) {
	s, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}
