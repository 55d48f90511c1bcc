package cniplugin

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// kubeStatefulSet creates a StatefulSet object (no controller acts on it)
// and returns it.
func kubeStatefulSet(t testing.TB, kc *kubetest.Cluster, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "agnhost"}}}}}}
	out, err := kc.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setPod creates pod p of sts on node, as the StatefulSet controller and
// the scheduler would leave it, with annotations.
func setPod(t testing.TB, kc *kubetest.Cluster, p *pod, sts *appsv1.StatefulSet, node string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	yes := true
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "agnhost"}}}}
	if sts != nil {
		obj.Labels = map[string]string{"app": sts.Name}
		obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: &yes}}
	}
	var out *corev1.Pod
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Refused until the namespace's service account exists.
		if out, err = kc.Client.CoreV1().Pods(p.namespace).Create(context.Background(), obj, metav1.CreateOptions{}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deletePod deletes a pod at once and waits until the API has forgotten
// it.
func deletePod(t testing.TB, kc *kubetest.Cluster, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := kc.Client.CoreV1().Pods(ns).Delete(ctx, name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := kc.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s still exists", ns, name)
		}
	}
}

// TestStickyAddresses runs the calico plugin in Kubernetes mode against a
// real API server: a StatefulSet pod with ipReleasePolicy immutable (or
// Galaxy's never) that is deleted and re-created under the same name on
// another node gets the same address, used there as a borrowed address;
// while the old pod's container still holds it the new one's ADD fails
// with "try again later", naming the holder, and leaves nothing behind;
// without a policy the address is released on DEL as before; a policy on
// a pod that is not a StatefulSet's is refused clearly.
func TestStickyAddresses(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-s", "10.84.0.0/16", 26)
	n1 := c.newKubeNode(t, "node1")
	n2 := c.newKubeNode(t, "node2")
	ns := fmt.Sprintf("sticky-%d", time.Now().UnixNano()%1000000)
	kubeNamespace(t, n1.kc, ns, nil, nil)
	list1, list2 := n1.kubeConf(t, nil, nil), n2.kubeConf(t, nil, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		name, key, policy string
	}{
		{"immutable", k8s.AnnotationIPReleasePolicy, "immutable"},
		{"never (Galaxy's annotation)", k8s.AnnotationGalaxyIPReleasePolicy, "never"},
		{"empty", k8s.AnnotationIPReleasePolicy, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setName := "db" + strings.Split(tc.name, " ")[0]
			sts := kubeStatefulSet(t, n1.kc, ns, setName, 2)
			annot := map[string]string{tc.key: tc.policy}
			handle := ipam.StickyHandleID("k8s-pod-network", ns, "StatefulSet", setName, setName+"-0")
			sticky := tc.policy != ""

			p1 := n1.newPod(ns, setName+"-0")
			setPod(t, n1.kc, p1, sts, "node1", annot)
			r, err := n1.add(list1, p1.runtimeConf(true))
			if err != nil {
				t.Fatalf("ADD on node1: %v", err)
			}
			_, addrs := resultAddrs(t, r)
			first := addrs[0].Addr()
			if got := c.handleIPs(t, handle); sticky != slices.Equal(got, []netip.Addr{first}) {
				t.Fatalf("reservation %s holds %v (address %s, sticky %t)", handle, got, first, sticky)
			}

			// The pod is deleted and re-created on node2 before node1's
			// kubelet has torn the old sandbox down.
			deletePod(t, n1.kc, ns, p1.name)
			p2 := n2.newPod(ns, p1.name)
			setPod(t, n2.kc, p2, sts, "node2", annot)
			if sticky {
				_, err := n2.add(list2, p2.runtimeConf(true))
				if err == nil || cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "still held") || !strings.Contains(err.Error(), p1.containerID) {
					t.Fatalf("ADD on node2 while node1's container holds the address: %v (code %d)", err, cniCode(err))
				}
				n2.nothingLeft(t, p2)
				if al, err := c.alloc.GetAssignmentAttributes(ctx, first); err != nil || al.Attrs[ipam.AttrContainer] != p1.containerID || al.Attrs["node"] != "node1" {
					t.Errorf("after the refused ADD: %+v, %v", al, err)
				}
			}
			if err := n1.del(list1, p1.runtimeConf(true)); err != nil {
				t.Fatalf("DEL on node1: %v", err)
			}
			if sticky {
				al, err := c.alloc.GetAssignmentAttributes(ctx, first)
				if err != nil || al.HandleID != handle || al.InUse() || al.Attrs[ipam.AttrReleasePolicy] != tc.policy || al.Attrs[ipam.AttrOwnerName] != setName {
					t.Fatalf("after the old pod's DEL: %+v, %v (want reserved and unused)", al, err)
				}
			} else if _, err := c.alloc.GetAssignmentAttributes(ctx, first); err == nil {
				t.Fatalf("without a policy %s is still allocated after DEL", first)
			}
			r, err = n2.add(list2, p2.runtimeConf(true))
			if err != nil {
				t.Fatalf("ADD on node2: %v", err)
			}
			_, addrs = resultAddrs(t, r)
			if got := addrs[0].Addr(); sticky && got != first {
				t.Errorf("re-created pod got %s, want its sticky %s", got, first)
			}
			if sticky {
				al, _ := c.alloc.GetAssignmentAttributes(ctx, first)
				if al.Attrs["node"] != "node2" || al.Attrs[ipam.AttrContainer] != p2.containerID || al.Attrs[ipam.AttrPodUID] == "" {
					t.Errorf("reservation used on node2: %v", al.Attrs)
				}
				if err := n2.check(list2, p2.runtimeConf(true)); err != nil {
					t.Errorf("CHECK of the re-created pod: %v", err)
				}
				if ep := c.endpoint(t, ns, wepName(n2.node, p2, true)); ep == nil || !slices.Contains(ep.Spec.IPNetworks, netip.PrefixFrom(first, 32).String()) {
					t.Errorf("node2's endpoint: %+v", ep)
				}
			}
			if err := n2.del(list2, p2.runtimeConf(true)); err != nil {
				t.Fatal(err)
			}
			deletePod(t, n2.kc, ns, p2.name)
			if got := c.handleIPs(t, handle); sticky != (len(got) == 1) {
				t.Errorf("after the last DEL the reservation holds %v", got)
			}
			if sticky {
				if err := c.alloc.ReleaseByHandle(ctx, handle); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	t.Run("not a StatefulSet's pod", func(t *testing.T) {
		p := n1.newPod(ns, "loner")
		setPod(t, n1.kc, p, nil, "node1", map[string]string{k8s.AnnotationIPReleasePolicy: "immutable"})
		_, err := n1.add(list1, p.runtimeConf(true))
		if err == nil || !strings.Contains(err.Error(), "needs a pod owned by a StatefulSet") {
			t.Fatalf("ADD: %v", err)
		}
		n1.nothingLeft(t, p)
	})
	t.Run("bad policy", func(t *testing.T) {
		p := n1.newPod(ns, "bad")
		setPod(t, n1.kc, p, nil, "node1", map[string]string{k8s.AnnotationGalaxyIPReleasePolicy: "forever"})
		_, err := n1.add(list1, p.runtimeConf(true))
		if err == nil || !strings.Contains(err.Error(), `"forever"`) {
			t.Fatalf("ADD: %v", err)
		}
		n1.nothingLeft(t, p)
	})
}
