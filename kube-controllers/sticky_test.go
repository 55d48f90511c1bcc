package kubecontrollers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

func statefulSet(t *testing.T, c *kubetest.Cluster, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{"app": name}
	out, err := c.Client.AppsV1().StatefulSets(ns).Create(context.Background(), &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStickyGarbageCollection: IPAM garbage collection never takes a
// sticky reservation while its owner wants it — immutable ones while
// their StatefulSet exists and has the pod's ordinal, never ones at all —
// and releases, after the grace period, an immutable one whose
// StatefulSet was scaled down below its ordinal or is gone; a
// reservation's use by a container whose pod is gone ends after the
// grace period, the reservation staying.
func TestStickyGarbageCollection(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	node := "snode-" + uniq()
	kubeNode(t, c, node, nil)
	f := newFabric(t, s, node)
	ns := "sg-" + uniq()
	namespace(t, c, ns, nil)
	db := statefulSet(t, c, ns, "db", 2)
	ndb := statefulSet(t, c, ns, "ndb", 1)
	reserve := func(policy, owner, uid, pod string) string {
		h := ipam.StickyHandleID("k8s-pod-network", ns, "StatefulSet", owner, pod)
		if _, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: h, NewHandle: true, Hostname: node,
			Attrs: map[string]string{"namespace": ns, "pod": pod, ipam.AttrReleasePolicy: policy, ipam.AttrOwnerKind: "StatefulSet",
				ipam.AttrOwnerName: owner, ipam.AttrOwnerUID: uid}}); err != nil {
			t.Fatal(err)
		}
		return h
	}
	db0 := reserve("immutable", "db", string(db.UID), "db-0")
	// db-0's address is used by a container whose pod is gone (its node
	// died before the DEL).
	db0IPs, err := f.alloc.UseSticky(ctx, db0, map[string]string{ipam.AttrContainer: "dead", ipam.AttrPodUID: "uid-dead", "node": node})
	if err != nil {
		t.Fatal(err)
	}
	db1 := reserve("immutable", "db", string(db.UID), "db-1")
	ndb0 := reserve("never", "ndb", string(ndb.UID), "ndb-0")
	orphan := reserve("immutable", "gone", "uid-gone", "gone-0")
	reserved := func(h string) bool {
		ips, err := f.alloc.IPsByHandle(ctx, h)
		if errors.Is(err, datastore.ErrNotFound) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return len(ips) > 0
	}

	grace := time.Second
	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "node", "RECONCILER_PERIOD": "300ms"})
	setLeakGracePeriod(t, ctx, s, grace)
	_ = in
	// The reservation of a StatefulSet that does not exist goes; the
	// others stay, though none of their pods exists.
	eventually(t, 10*grace, func() error {
		if reserved(orphan) {
			return errors.New("the reservation of a deleted StatefulSet's pod is still there")
		}
		return nil
	})
	for _, h := range []string{db0, db1, ndb0} {
		if !reserved(h) {
			t.Errorf("reservation %s was released while its StatefulSet wants it", h)
		}
	}
	// Scaled down to one: db-1's goes, db-0's stays; ndb deleted: its
	// never reservation stays.
	one := int32(1)
	db.Spec.Replicas = &one
	if _, err := c.Client.AppsV1().StatefulSets(ns).Update(ctx, db, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.AppsV1().StatefulSets(ns).Delete(ctx, "ndb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*grace, func() error {
		if reserved(db1) {
			return fmt.Errorf("reservation %s of a pod scaled away is still there", db1)
		}
		return nil
	})
	// The dead container's use of db-0's address has ended; the
	// reservation stays.
	eventually(t, 10*grace, func() error {
		al, err := f.alloc.GetAssignmentAttributes(ctx, db0IPs[0])
		if err != nil {
			return err
		}
		if al.InUse() {
			return fmt.Errorf("db-0's address is still used by %s", al.Attrs[ipam.AttrContainer])
		}
		return nil
	})
	// Two more grace periods' worth of passes change nothing else.
	time.Sleep(2 * grace)
	for _, h := range []string{db0, ndb0} {
		if !reserved(h) {
			t.Errorf("reservation %s was released", h)
		}
	}
}
