package lab

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/palisade-net/palisade/libcalico/k8s"
)

// Owner is the workload owning a pod. Only StatefulSets are made: theirs
// are the only pods that keep their name (NAME-<ordinal>) from one
// incarnation to the next, which is what a sticky address is kept by.
type Owner struct {
	// Kind is "StatefulSet" (or empty: no owner).
	Kind string
	// Name is the workload's name in the pod's namespace.
	Name string
}

// IsZero says there is no owner.
func (o Owner) IsZero() bool { return o.Kind == "" }

func (o Owner) String() string {
	if o.IsZero() {
		return ""
	}
	return strings.ToLower(o.Kind) + "/" + o.Name
}

// ParseOwner reads --owner: statefulset/NAME (also statefulsets/NAME and
// sts/NAME, kubectl's names for the kind).
func ParseOwner(s string) (Owner, error) {
	if s == "" {
		return Owner{}, nil
	}
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return Owner{}, fmt.Errorf("--owner %q: want statefulset/NAME", s)
	}
	switch strings.ToLower(kind) {
	case "statefulset", "statefulsets", "sts":
	default:
		return Owner{}, fmt.Errorf("--owner %q: unknown owner kind %q: want statefulset/NAME (the only workload the lab makes: its pods keep their name)", s, kind)
	}
	if !k8sNamespaceRE.MatchString(name) {
		return Owner{}, fmt.Errorf("--owner %q: StatefulSet name %q is not a DNS label", s, name)
	}
	return Owner{Kind: "StatefulSet", Name: name}, nil
}

// pairs splits k=v,k=v (space around a pair trimmed, a value may hold
// "=" and be empty); when a piece is not k=v, ok is false and bad is
// that piece.
func pairs(s string) (kvs [][2]string, bad string, ok bool) {
	for _, kv := range strings.Split(s, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(kv), "=")
		if !found || k == "" {
			return nil, kv, false
		}
		kvs = append(kvs, [2]string{k, v})
	}
	return kvs, "", true
}

// ParseLabels reads --labels: k=v,k=v (a key given twice keeps its last
// value).
func ParseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	kvs, _, ok := pairs(s)
	if !ok {
		return nil, fmt.Errorf("--labels %q: want k=v,k=v", s)
	}
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv[0]] = kv[1]
	}
	return out, nil
}

// ParseAnnotations reads --annotations: k=v,k=v, each key a qualified
// name (prefix/name), values free but for commas; a value may be empty.
func ParseAnnotations(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	kvs, bad, ok := pairs(s)
	if !ok {
		return nil, fmt.Errorf("--annotations %q: %q is not k=v (want k=v,k=v)", s, bad)
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k := kv[0]
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--annotations %q: key %q: %s", s, k, strings.Join(errs, "; "))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--annotations %q: key %q given twice", s, k)
		}
		out[k] = kv[1]
	}
	return out, nil
}

// check refuses options a pod cannot be made with, before anything is
// made.
func (o PodOptions) check(namespace, name string, kube bool) error {
	key := namespace + "/" + name
	if len(o.Annotations) > 0 && !kube {
		return fmt.Errorf("pod %s: --annotations are set on the Pod object: the lab needs --kubernetes", key)
	}
	if _, set := o.Annotations[k8s.AnnotationIPAddrs]; set && o.IP.IsValid() {
		return fmt.Errorf("pod %s: --ip and the annotation %s both ask for an address: give one", key, k8s.AnnotationIPAddrs)
	}
	if o.Owner.IsZero() {
		return nil
	}
	if !kube {
		return fmt.Errorf("pod %s: --owner %s makes a StatefulSet object: the lab needs --kubernetes", key, o.Owner)
	}
	if _, ok := k8s.StatefulSetOrdinal(o.Owner.Name, name); !ok {
		return fmt.Errorf("pod %s: a pod of StatefulSet %s is named %s-<ordinal> (%s-0, %s-1 …)", key, o.Owner.Name, o.Owner.Name, o.Owner.Name, o.Owner.Name)
	}
	return nil
}

// statefulSetLabel is the label the StatefulSets the lab makes select
// their pods by.
const statefulSetLabel = "app.kubernetes.io/name"

// ensureStatefulSet returns the pod's StatefulSet, creating it (with
// ordinal+1 replicas) when missing, or scaling it up to ordinal+1 replicas
// when it has fewer: the lab plays the user scaling up and the controller
// making the pod.
func (l *Lab) ensureStatefulSet(ctx context.Context, namespace string, o Owner, ordinal int) (*appsv1.StatefulSet, error) {
	kc, err := l.Kube()
	if err != nil {
		return nil, err
	}
	sets := kc.AppsV1().StatefulSets(namespace)
	want := int32(ordinal + 1)
	for attempt := 0; ; attempt++ {
		set, err := sets.Get(ctx, o.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			sel := map[string]string{statefulSetLabel: o.Name}
			set = &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: namespace},
				Spec: appsv1.StatefulSetSpec{Replicas: &want, ServiceName: o.Name, Selector: &metav1.LabelSelector{MatchLabels: sel},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pod", Image: "palisade-lab/pause"}}}}},
			}
			set, err = sets.Create(ctx, set, metav1.CreateOptions{})
			if err == nil {
				l.say("created StatefulSet %s/%s (%d replicas)", namespace, o.Name, want)
				return set, nil
			}
		case err == nil:
			if set.Spec.Replicas != nil && *set.Spec.Replicas >= want {
				return set, nil
			}
			set.Spec.Replicas = &want
			set, err = sets.Update(ctx, set, metav1.UpdateOptions{})
			if err == nil {
				l.say("scaled StatefulSet %s/%s up to %d replicas", namespace, o.Name, want)
				return set, nil
			}
		}
		if (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)) && attempt < 5 {
			continue // another pod add made or scaled it meanwhile
		}
		return nil, fmt.Errorf("StatefulSet %s/%s: %w", namespace, o.Name, err)
	}
}

// ownPod makes pod a pod of its StatefulSet as the controller does: the
// template's labels, the pod-name and pod-index labels, and the
// controller ownerReference. A --labels key the template sets otherwise
// is refused (the pod would not be the set's).
func ownPod(pod *corev1.Pod, set *appsv1.StatefulSet, ordinal int) error {
	labels := map[string]string{}
	maps.Copy(labels, set.Spec.Template.Labels)
	for _, k := range slices.Sorted(maps.Keys(pod.Labels)) {
		if v, ok := labels[k]; ok && v != pod.Labels[k] {
			return fmt.Errorf("pod %s/%s: label %s=%s differs from StatefulSet %s's template (%s=%s)", pod.Namespace, pod.Name, k, pod.Labels[k], set.Name, k, v)
		}
		labels[k] = pod.Labels[k]
	}
	labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
	pod.Labels = labels
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
	return nil
}
