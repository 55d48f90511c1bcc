package lab

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s"
)

// createKubePod creates the pod's namespace (when missing) and its Pod
// object as the scheduler leaves it: spec.nodeName set, the default
// service account, a container per served port with its named port,
// the ipAddrs annotation for a requested address, the given annotations,
// and, for a StatefulSet's pod, the set (made when missing) as its
// controller owner.
func (l *Lab) createKubePod(ctx context.Context, p Pod, n Node, o PodOptions) error {
	kc, err := l.Kube()
	if err != nil {
		return err
	}
	if err := l.ensureKubeNamespace(ctx, p.Namespace, false); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: o.Labels},
		Spec: corev1.PodSpec{NodeName: n.Name, ServiceAccountName: "default", AutomountServiceAccountToken: new(bool),
			TerminationGracePeriodSeconds: new(int64)},
	}
	if len(o.Annotations) > 0 {
		pod.Annotations = maps.Clone(o.Annotations)
	}
	if o.IP.IsValid() {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[k8s.AnnotationIPAddrs] = fmt.Sprintf("[%q]", o.IP.String())
	}
	if !o.Owner.IsZero() {
		ord, _ := k8s.StatefulSetOrdinal(o.Owner.Name, p.Name)
		set, err := l.ensureStatefulSet(ctx, p.Namespace, o.Owner, ord)
		if err != nil {
			return err
		}
		if err := ownPod(pod, set, ord); err != nil {
			return err
		}
	}
	for _, s := range o.Serve {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("cont-%d-%s", s.Port, strings.ToLower(s.Protocol)), Image: "palisade-lab/serve",
			Ports: []corev1.ContainerPort{{Name: s.Name(), ContainerPort: int32(s.Port), Protocol: corev1.Protocol(s.Protocol)}},
		})
	}
	if len(pod.Spec.Containers) == 0 {
		pod.Spec.Containers = []corev1.Container{{Name: "pod", Image: "palisade-lab/pause"}}
	}
	// A new namespace gets its default service account from
	// kube-controller-manager a moment later; until then the pod is
	// refused. A namespace deleted since this process made it is made
	// again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = kc.CoreV1().Pods(p.Namespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsNotFound(err) && time.Now().Before(deadline) {
			if err := l.ensureKubeNamespace(ctx, p.Namespace, true); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "serviceaccount") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("creating pod %s: %w", p.Key(), err)
	}
	return nil
}

// ensureKubeNamespace creates a Kubernetes namespace unless this process
// has already seen it (or again, after it was deleted, with recheck).
func (l *Lab) ensureKubeNamespace(ctx context.Context, name string, recheck bool) error {
	if _, ok := l.kubeNamespaces.Load(name); ok && !recheck {
		return nil
	}
	kc, err := l.Kube()
	if err != nil {
		return err
	}
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	l.kubeNamespaces.Store(name, true)
	return nil
}

// writePodStatus writes the status kubelet would once the sandbox is up:
// Running and Ready, on its node's address, with the pod's address.
func (l *Lab) writePodStatus(ctx context.Context, p Pod, n Node) error {
	kc, err := l.Kube()
	if err != nil {
		return err
	}
	pod, err := kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s: %w", p.Key(), err)
	}
	now := metav1.NewTime(time.Now())
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: n.IP.String(), HostIPs: []corev1.HostIP{{IP: n.IP.String()}},
		PodIP: p.IP.String(), PodIPs: []corev1.PodIP{{IP: p.IP.String()}}, StartTime: &now,
		Conditions: []corev1.PodCondition{cond(corev1.PodScheduled), cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady)},
	}
	started := true
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Ready: true, Started: &started,
			Image: c.Image, ImageID: c.Image, ContainerID: "lab://" + p.ContainerID,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	if _, err := kc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of pod %s: %w", p.Key(), err)
	}
	return nil
}

// deleteKubePod deletes the Pod object at once (grace period 0).
func (l *Lab) deleteKubePod(ctx context.Context, p Pod) error {
	kc, err := l.Kube()
	if err != nil {
		return err
	}
	err = kc.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s: %w", p.Key(), err)
	}
	return nil
}
