package kubecontrollers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/names"
)

// fabric is a Calico etcd with a pool and Calico nodes, where the test
// plays the CNI plugin: addresses from IPAM, WorkloadEndpoints written.
type fabric struct {
	t     *testing.T
	s     *etcdv3.Store
	alloc *ipam.Allocator
}

func newFabric(t *testing.T, s *etcdv3.Store, nodes ...string) *fabric {
	t.Helper()
	f := &fabric{t: t, s: s, alloc: ipam.New(s, s.KV())}
	ctx := context.Background()
	pool := &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "pool"},
		Spec: v3.IPPoolSpec{CIDR: "10.77.0.0/16"}}
	v3.Default(pool)
	if _, err := s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		f.calicoNode(n, n)
	}
	return f
}

// calicoNode writes a Calico node standing for Kubernetes node kube
// ("" for a node outside Kubernetes).
func (f *fabric) calicoNode(name, kube string) {
	f.t.Helper()
	n := &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: name,
		Labels: map[string]string{"calico-only": "kept"}},
		Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.11/24"}}}
	if kube != "" {
		n.Spec.OrchRefs = []v3.OrchRef{{Orchestrator: "k8s", NodeName: kube}}
	}
	v3.Default(n)
	if _, err := f.s.Create(context.Background(), n); err != nil {
		f.t.Fatal(err)
	}
}

// endpoint assigns an address for pod ns/name on node (handle
// k8s-pod-network.<container>) and writes its WorkloadEndpoint with
// labels, as the CNI plugin does.
func (f *fabric) endpoint(node, ns, name, container string, labels map[string]string) (*v3.WorkloadEndpoint, netip.Addr) {
	f.t.Helper()
	ctx := context.Background()
	handle := "k8s-pod-network." + container
	v4, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Hostname: node,
		Attrs: map[string]string{"namespace": ns, "pod": name, "node": node}})
	if err != nil || v4 == nil || len(v4.IPs) != 1 {
		f.t.Fatalf("assigning an address to %s/%s: %v", ns, name, err)
	}
	ip := v4.IPs[0].Addr()
	wep := &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(node, "k8s", name, "eth0"), Namespace: ns, Labels: labels},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: node, Pod: name, Endpoint: "eth0", ContainerID: container,
			InterfaceName: "cali" + container[:11], Profiles: []string{"kns." + ns}, IPNetworks: []string{ip.String() + "/32"}}}
	v3.Default(wep)
	out, err := f.s.Create(ctx, wep)
	if err != nil {
		f.t.Fatal(err)
	}
	return out.(*v3.WorkloadEndpoint), ip
}

// held says whether handle still holds addresses.
func (f *fabric) held(container string) bool {
	ips, err := f.alloc.IPsByHandle(context.Background(), "k8s-pod-network."+container)
	if errors.Is(err, datastore.ErrNotFound) {
		return false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return len(ips) > 0
}

// runningPod creates a pod on node with labels and writes its status as
// kubelet would: Running, with ip.
func runningPod(t *testing.T, c *kubetest.Cluster, ns, name, node string, labels map[string]string, ip netip.Addr) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "default", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	var err error
	for attempt := 0; ; attempt++ {
		// The default service account may not exist yet in a new namespace.
		if p, err = c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err == nil || attempt == 100 {
			break
		}
		p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "default", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ip.IsValid() {
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}
		if p, err = c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func deletePod(t *testing.T, c *kubetest.Cluster, ns, name string) {
	t.Helper()
	if err := c.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

func wepLabels(t *testing.T, s *etcdv3.Store, wep *v3.WorkloadEndpoint) (map[string]string, bool) {
	r := stored(t, s, datastore.KeyOf(wep))
	if r == nil {
		return nil, false
	}
	return r.GetObjectMeta().Labels, true
}

// TestWorkloadEndpoints runs the workloadendpoint controller: labels
// out of date at start are corrected, a pod's label change reaches its
// endpoint within a second, an endpoint written after the start with
// stale labels is corrected, the endpoint of a pod deleted without a CNI
// DEL is removed with its address released (another container's address
// of the same pod name is left alone), and endpoints of non-Kubernetes
// workloads are not touched.
func TestWorkloadEndpoints(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	ns := "w-" + uniq()
	namespace(t, c, ns, nil)
	node := "wnode-" + uniq()
	f := newFabric(t, s, node)

	wa, ipa := f.endpoint(node, ns, "a", "aaaaaaaaaaaaaaaa", map[string]string{"app": "stale"})
	pa := runningPod(t, c, ns, "a", node, map[string]string{"app": "a"}, ipa)
	wb, ipb := f.endpoint(node, ns, "b", "bbbbbbbbbbbbbbbb", k8s.PodLabels(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{"app": "b"}},
		Spec: corev1.PodSpec{ServiceAccountName: "default"}}))
	runningPod(t, c, ns, "b", node, map[string]string{"app": "b"}, ipb)
	other := &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(node, "cni", "vm1", "eth0"), Namespace: "default", Labels: map[string]string{"x": "y"}},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "cni", Node: node, Workload: "vm1", Endpoint: "eth0", ContainerID: "vm1",
			InterfaceName: "calivm1", IPNetworks: []string{"10.99.0.1/32"}}}
	v3.Default(other)
	if _, err := s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "workloadendpoint"})
	in.waitReady(true, 30*time.Second)
	if l, _ := wepLabels(t, s, wa); !maps.Equal(l, k8s.PodLabels(pa)) {
		t.Errorf("after the start, endpoint a has labels %v, want %v", l, k8s.PodLabels(pa))
	}

	// A label change reaches the endpoint within a second.
	pa, _ = c.Client.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{})
	pa.Labels = map[string]string{"app": "a", "tier": "web"}
	pa, err := c.Client.CoreV1().Pods(ns).Update(ctx, pa, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	eventually(t, time.Second, func() error {
		if l, _ := wepLabels(t, s, wa); !maps.Equal(l, k8s.PodLabels(pa)) {
			return fmt.Errorf("endpoint a has labels %v, want %v", l, k8s.PodLabels(pa))
		}
		return nil
	})
	t.Logf("pod label change on the endpoint after %s", time.Since(began).Round(time.Millisecond))

	// An endpoint written after the start with stale labels (the pod's
	// labels changed between the CNI plugin's read and its write).
	pc := runningPod(t, c, ns, "c", node, map[string]string{"app": "c"}, netip.Addr{})
	wc, _ := f.endpoint(node, ns, "c", "cccccccccccccccc", map[string]string{"app": "old"})
	eventually(t, time.Second, func() error {
		if l, _ := wepLabels(t, s, wc); !maps.Equal(l, k8s.PodLabels(pc)) {
			return fmt.Errorf("endpoint c has labels %v, want %v", l, k8s.PodLabels(pc))
		}
		return nil
	})

	// Pod b deleted, no CNI DEL: its endpoint goes and its address is
	// released.
	deletePod(t, c, ns, "b")
	eventually(t, 5*time.Second, func() error {
		if _, ok := wepLabels(t, s, wb); ok {
			return errors.New("the endpoint of deleted pod b still exists")
		}
		if f.held("bbbbbbbbbbbbbbbb") {
			return errors.New("pod b's address is still allocated")
		}
		return nil
	})
	if !f.held("aaaaaaaaaaaaaaaa") || !f.held("cccccccccccccccc") {
		t.Error("the addresses of live pods were released")
	}
	if stored(t, s, datastore.KeyOf(other)) == nil {
		t.Error("a non-Kubernetes endpoint was removed")
	}
}
