package kubetest

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReadyPod creates a pod on node and writes its status as a kubelet would:
// Running and Ready with ip (so the endpointslice controller of
// StartControllerManager lists it in its Services' EndpointSlices).
func (c *Cluster) ReadyPod(ctx context.Context, ns, name, node, ip string, labels map[string]string) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	var made *corev1.Pod
	var err error
	for attempt := 0; ; attempt++ {
		// The default service account may not exist yet in a new namespace.
		if made, err = c.Client.CoreV1().Pods(ns).Create(ctx, p.DeepCopy(), metav1.CreateOptions{}); err == nil {
			break
		}
		if attempt == 200 {
			return fmt.Errorf("creating pod %s/%s: %w", ns, name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	now := metav1.Now()
	made.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, Image: "none",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of pod %s/%s: %w", ns, name, err)
	}
	return nil
}
