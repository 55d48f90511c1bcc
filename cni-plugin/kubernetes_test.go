package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// The package's tests share one API server, started by the first test
// that needs it and stopped by TestMain.
var (
	kubeOnce   sync.Once
	kubeShared *kubetest.Cluster
	kubeErr    error
	kubeDir    string
)

func sharedKube(t testing.TB) *kubetest.Cluster {
	t.Helper()
	kubeOnce.Do(func() {
		if kubeDir, kubeErr = os.MkdirTemp("", "plcni-kube-"); kubeErr == nil {
			kubeShared, kubeErr = kubetest.Shared(kubeDir)
		}
	})
	if errors.Is(kubeErr, kubetest.ErrNoBinaries) {
		t.Skip(kubeErr)
	}
	if kubeErr != nil {
		t.Fatalf("the shared kube-apiserver: %v", kubeErr)
	}
	return kubeShared
}

func stopSharedKube() {
	if kubeShared != nil {
		kubeShared.Stop()
	}
	if kubeDir != "" {
		os.RemoveAll(kubeDir)
	}
}

// kubeNode is a node whose plugins reach the API server through a proxy
// in the node's namespace, with a kubeconfig for it.
type kubeNode struct {
	*node
	kc         *kubetest.Cluster
	api        *proxy
	kubeconfig string
}

func (c *cluster) newKubeNode(t testing.TB, name string) *kubeNode {
	t.Helper()
	kc := sharedKube(t)
	n := c.newNode(name)
	kn := &kubeNode{node: n, kc: kc}
	listen := func(addr string) (l net.Listener, err error) {
		err = n.inNode(func() error {
			l, err = net.Listen("tcp", addr)
			return err
		})
		return l, err
	}
	var err error
	if kn.api, err = startProxy(t, strings.TrimPrefix(kc.URL, "https://"), listen); err != nil {
		t.Fatal(err)
	}
	kn.kubeconfig = filepath.Join(c.dir, name+".kubeconfig")
	if err := kc.Files.WriteKubeconfig(kn.kubeconfig, "https://"+kn.api.l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	return kn
}

// kubeConf is the calico conflist in Kubernetes mode.
func (n *kubeNode) kubeConf(t testing.TB, ipamConf map[string]any, extra map[string]any) *libcni.NetworkConfigList {
	list := n.calicoConf("1.0.0", ipamConf)
	list = confWith(t, list, "kubernetes", map[string]any{"kubeconfig": n.kubeconfig})
	list = confWith(t, list, "policy", map[string]any{"type": "k8s"})
	for k, v := range extra {
		list = confWith(t, list, k, v)
	}
	return list
}

func kubeNamespace(t testing.TB, kc *kubetest.Cluster, name string, labels, annotations map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: labels, Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// kubePod creates the Pod object of p, as the scheduler leaves it (node
// set), with labels, annotations and the e2e's named ports.
func kubePod(t testing.TB, kc *kubetest.Cluster, p *pod, node, sa string, labels, annotations map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if sa != "" && sa != "default" {
		_, err := kc.Client.CoreV1().ServiceAccounts(p.namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: p.namespace}}, metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{
			{Name: "c80", Image: "agnhost", Ports: []corev1.ContainerPort{{Name: "serve-80-tcp", ContainerPort: 80, Protocol: corev1.ProtocolTCP}}},
			{Name: "c81", Image: "agnhost", Ports: []corev1.ContainerPort{{Name: "serve-81-udp", ContainerPort: 81, Protocol: corev1.ProtocolUDP},
				{Name: "serve-81-sctp", ContainerPort: 81, Protocol: corev1.ProtocolSCTP}}},
		}}}
	var out *corev1.Pod
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A new namespace's service account comes from the controller
		// manager a moment later; the pod is refused until then.
		if out, err = kc.Client.CoreV1().Pods(p.namespace).Create(ctx, obj.DeepCopy(), metav1.CreateOptions{}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// nothingLeft checks that a failed ADD left no endpoint, address or veth.
func (n *kubeNode) nothingLeft(t testing.TB, p *pod) {
	t.Helper()
	if ep := n.c.endpoint(t, p.namespace, wepName(n.node, p, true)); ep != nil {
		t.Errorf("an endpoint was written: %+v", ep.Spec)
	}
	if ips := n.c.handleIPs(t, handleOf(p)); len(ips) != 0 {
		t.Errorf("addresses %v were allocated", ips)
	}
	if hs := n.hostState(t, hostVeth(p, true)); hs.exists {
		t.Errorf("host veth %s exists", hostVeth(p, true))
	}
}

// TestKubernetesMode runs the calico plugin in Kubernetes mode against a
// real API server: the endpoint carries the pod's labels with Calico's,
// the namespace and service-account profiles and the named ports; the pod
// is annotated with its addresses and DEL removes them; the addressing
// annotations (ipAddrs, ipAddrsNoIpam, ipv4pools on pod and namespace)
// are honoured; a missing pod, an unusable kubeconfig and an unreachable
// API server fail with clear CNI errors and allocate nothing.
func TestKubernetesMode(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.81.0.0/16", 26)
	c.addPool("pool-b", "10.82.0.0/16", 26)
	c.addPool("pool-ns", "10.83.0.0/16", 26)
	n := c.newKubeNode(t, "node1")
	ctx := context.Background()
	ns := "k-" + strings.ToLower(t.Name()[4:8]) + fmt.Sprint(time.Now().UnixNano()%100000)
	kubeNamespace(t, n.kc, ns, map[string]string{"team": "blue"}, nil)
	list := n.kubeConf(t, nil, nil)

	t.Run("labels, profiles, ports and annotations", func(t *testing.T) {
		p := n.newPod(ns, "web")
		kp := kubePod(t, n.kc, p, "node1", "api", map[string]string{"app": "web", "projectcalico.org/namespace": "spoofed"}, nil)
		r, err := n.add(list, p.runtimeConf(true))
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		_, addrs := resultAddrs(t, r)
		ep := c.endpoint(t, ns, wepName(n.node, p, true))
		if ep == nil {
			t.Fatal("no endpoint")
		}
		wantLabels := map[string]string{"app": "web", "projectcalico.org/namespace": ns, "projectcalico.org/orchestrator": "k8s",
			"projectcalico.org/serviceaccount": "api"}
		if !maps.Equal(ep.Labels, wantLabels) {
			t.Errorf("endpoint labels %v, want %v", ep.Labels, wantLabels)
		}
		if want := []string{"kns." + ns, "ksa." + ns + ".api"}; !slices.Equal(ep.Spec.Profiles, want) {
			t.Errorf("profiles %v, want %v", ep.Spec.Profiles, want)
		}
		wantPorts := []v3.WorkloadEndpointPort{{Name: "serve-80-tcp", Protocol: numorstring.ProtocolFromString("TCP"), Port: 80},
			{Name: "serve-81-udp", Protocol: numorstring.ProtocolFromString("UDP"), Port: 81},
			{Name: "serve-81-sctp", Protocol: numorstring.ProtocolFromString("SCTP"), Port: 81}}
		if !slices.Equal(ep.Spec.Ports, wantPorts) || ep.Spec.ServiceAccountName != "api" || ep.Spec.Pod != "web" {
			t.Errorf("ports %v, service account %q, pod %q", ep.Spec.Ports, ep.Spec.ServiceAccountName, ep.Spec.Pod)
		}
		got, err := n.kc.Client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{k8s.AnnotationPodIP: addrs[0].String(), k8s.AnnotationPodIPs: addrs[0].String(), k8s.AnnotationContainerID: p.containerID}
		for k, v := range want {
			if got.Annotations[k] != v {
				t.Errorf("pod annotation %s = %q, want %q", k, got.Annotations[k], v)
			}
		}
		_ = kp
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		got, _ = n.kc.Client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		for k := range want {
			if v, ok := got.Annotations[k]; ok {
				t.Errorf("after DEL the pod still has %s=%q", k, v)
			}
		}
		n.nothingLeft(t, p)
	})

	t.Run("a late DEL leaves the new sandbox's annotations", func(t *testing.T) {
		p := n.newPod(ns, "replaced")
		kubePod(t, n.kc, p, "node1", "", nil, nil)
		if _, err := n.add(list, p.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
		old := *p
		p2 := n.newPod(ns, "replaced")
		if _, err := n.add(list, p2.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
		if err := n.del(list, old.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
		got, _ := n.kc.Client.CoreV1().Pods(ns).Get(ctx, "replaced", metav1.GetOptions{})
		if got.Annotations[k8s.AnnotationContainerID] != p2.containerID || got.Annotations[k8s.AnnotationPodIP] == "" {
			t.Errorf("annotations after the old sandbox's DEL: %v", got.Annotations)
		}
		if err := n.del(list, p2.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ipAddrs", func(t *testing.T) {
		p := n.newPod(ns, "fixed")
		kubePod(t, n.kc, p, "node1", "", nil, map[string]string{k8s.AnnotationIPAddrs: `["10.82.7.7"]`})
		r, err := n.add(list, p.runtimeConf(true))
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if _, addrs := resultAddrs(t, r); len(addrs) != 1 || addrs[0].Addr() != netip.MustParseAddr("10.82.7.7") {
			t.Errorf("addresses %v, want 10.82.7.7", addrs)
		}
		if ips := c.handleIPs(t, handleOf(p)); !slices.Equal(ips, []netip.Addr{netip.MustParseAddr("10.82.7.7")}) {
			t.Errorf("handle holds %v", ips)
		}
		// A second pod asking for the same address gets an error and
		// nothing.
		q := n.newPod(ns, "fixed-again")
		kubePod(t, n.kc, q, "node1", "", nil, map[string]string{k8s.AnnotationIPAddrs: `["10.82.7.7"]`})
		if _, err := n.add(list, q.runtimeConf(true)); err == nil || !strings.Contains(err.Error(), "10.82.7.7") {
			t.Errorf("ADD of a second pod asking for 10.82.7.7: %v", err)
		}
		n.nothingLeft(t, q)
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
		if ips := c.handleIPs(t, handleOf(p)); len(ips) != 0 {
			t.Errorf("after DEL the handle holds %v", ips)
		}
	})

	t.Run("ipAddrsNoIpam", func(t *testing.T) {
		p := n.newPod(ns, "noipam")
		kubePod(t, n.kc, p, "node1", "", nil, map[string]string{k8s.AnnotationIPAddrsNoIPAM: `["10.99.1.1"]`})
		_, err := n.add(list, p.runtimeConf(true))
		if err == nil || !strings.Contains(err.Error(), "requested feature is not enabled: ip_addrs_no_ipam") {
			t.Fatalf("ADD without the feature: %v", err)
		}
		n.nothingLeft(t, p)
		enabled := n.kubeConf(t, nil, map[string]any{"feature_control": map[string]any{"ip_addrs_no_ipam": true}})
		r, err := n.add(enabled, p.runtimeConf(true))
		if err != nil {
			t.Fatalf("ADD with the feature: %v", err)
		}
		if _, addrs := resultAddrs(t, r); len(addrs) != 1 || addrs[0].Addr() != netip.MustParseAddr("10.99.1.1") {
			t.Errorf("addresses %v, want 10.99.1.1", addrs)
		}
		if a := c.allocated(t); len(a) != 0 {
			t.Errorf("IPAM allocated %v for an ipAddrsNoIpam pod", a)
		}
		if err := n.del(enabled, p.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ipv4pools on the pod and its namespace", func(t *testing.T) {
		pns := ns + "-pools"
		kubeNamespace(t, n.kc, pns, nil, map[string]string{k8s.AnnotationIPv4Pools: `["pool-ns"]`})
		inNS := n.newPod(pns, "from-namespace")
		kubePod(t, n.kc, inNS, "node1", "", nil, nil)
		own := n.newPod(pns, "own-pool")
		kubePod(t, n.kc, own, "node1", "", nil, map[string]string{k8s.AnnotationIPv4Pools: `["10.82.0.0/16"]`})
		for _, tc := range []struct {
			p    *pod
			pool string
		}{{inNS, "10.83.0.0/16"}, {own, "10.82.0.0/16"}} {
			r, err := n.add(list, tc.p.runtimeConf(true))
			if err != nil {
				t.Fatalf("ADD %s: %v", tc.p.name, err)
			}
			if _, addrs := resultAddrs(t, r); len(addrs) != 1 || !netip.MustParsePrefix(tc.pool).Contains(addrs[0].Addr()) {
				t.Errorf("%s: addresses %v, want one from %s", tc.p.name, addrs, tc.pool)
			}
			if err := n.del(list, tc.p.runtimeConf(true)); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("errors allocate nothing", func(t *testing.T) {
		missing := n.newPod(ns, "not-created")
		_, err := n.add(list, missing.runtimeConf(true))
		if cniCode(err) != types.ErrUnknownContainer || !strings.Contains(err.Error(), "pod "+ns+"/not-created does not exist") {
			t.Errorf("ADD of a pod that does not exist: code %d: %v", cniCode(err), err)
		}
		n.nothingLeft(t, missing)

		p := n.newPod(ns, "victim")
		kubePod(t, n.kc, p, "node1", "", nil, nil)
		for _, tc := range []struct {
			name, kubeconfig, want string
			code                   uint
		}{
			{"absent file", filepath.Join(c.dir, "nowhere.kubeconfig"), "nowhere.kubeconfig", types.ErrInvalidNetworkConfig},
			{"not a kubeconfig", writeFile(t, c.dir, "garbage.kubeconfig", "this: [is not"), "garbage.kubeconfig", types.ErrInvalidNetworkConfig},
			{"wrong token", writeFile(t, c.dir, "badtoken.kubeconfig", strings.ReplaceAll(string(n.kc.Files.Kubeconfig("https://"+n.api.l.Addr().String())), n.kc.Files.Token, "forged")),
				"refused the plugin's credentials", types.ErrInvalidNetworkConfig},
		} {
			bad := confWith(t, list, "kubernetes", map[string]any{"kubeconfig": tc.kubeconfig})
			_, err := n.add(bad, p.runtimeConf(true))
			if cniCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: code %d: %v; want code %d saying %q", tc.name, cniCode(err), err, tc.code, tc.want)
			}
			n.nothingLeft(t, p)
		}
		n.api.cut()
		_, err = n.add(confWith(t, list, "datastore_timeout", "2s"), p.runtimeConf(true))
		n.api.restore(t)
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "Kubernetes API server") {
			t.Errorf("ADD with the API server unreachable: code %d: %v", cniCode(err), err)
		}
		n.nothingLeft(t, p)
	})
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHostLocalUsePodCidr runs host-local under the calico plugin with
// subnet usePodCidr: the address comes from the node's spec.podCIDR.
func TestHostLocalUsePodCidr(t *testing.T) {
	c := newCluster(t)
	n := c.newKubeNode(t, "node1")
	name := "podcidr-" + fmt.Sprint(time.Now().UnixNano()%100000)
	ctx := context.Background()
	if _, err := n.kc.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{PodCIDR: "10.91.3.0/24", PodCIDRs: []string{"10.91.3.0/24"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.kc.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	ipamConf := map[string]any{"type": "host-local", "subnet": "usePodCidr", "dataDir": filepath.Join(c.dir, "host-local")}
	list := confWith(t, n.calicoConf("1.0.0", ipamConf), "kubernetes", map[string]any{"kubeconfig": n.kubeconfig, "node_name": name})
	p := n.newPod("default", "hl")
	r, err := n.add(list, p.runtimeConf(true))
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if _, addrs := resultAddrs(t, r); len(addrs) != 1 || !netip.MustParsePrefix("10.91.3.0/24").Contains(addrs[0].Addr()) {
		t.Errorf("addresses %v, want one from the node's pod CIDR 10.91.3.0/24", addrs)
	}
	if err := n.del(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if left := hostLocalAllocations(t, filepath.Join(c.dir, "host-local")); len(left) != 0 {
		t.Errorf("host-local still holds %v", left)
	}
	// Without an API server to ask, usePodCidr is a clear error.
	plain := n.calicoConf("1.0.0", ipamConf)
	if _, err := n.add(plain, n.newPod("default", "hl2").runtimeConf(true)); cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "usePodCidr") {
		t.Errorf("usePodCidr without kubernetes settings: %v", err)
	}
}
