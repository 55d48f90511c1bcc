package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/cni-plugin/install"
	"github.com/palisade-net/palisade/cni-plugin/k8sapi"
	"github.com/palisade-net/palisade/cni-plugin/netconf"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/golden"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// syncBuffer is a bytes.Buffer safe for a process writing and a test
// reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a binary until the test ends (SIGTERM, then the exit is
// checked).
func start(t *testing.T, bin string, args, env []string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: exit after SIGTERM: %v", filepath.Base(bin), err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s still running 15s after SIGTERM", filepath.Base(bin))
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), out.String())
		}
	})
	return out
}

// secrets writes the etcd client certificate as the Secret's volume holds
// it (etcd-ca, etcd-cert, etcd-key).
func secrets(t *testing.T, dir string, files etcdtest.TLSFiles) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"etcd-ca": files.CA, "etcd-cert": files.ClientCert, "etcd-key": files.ClientKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
}

// testKubeControllers runs calico-kube-controllers with the Deployment's
// environment, its ServiceAccount's token under RBAC and a TLS etcd with
// client certificates: it wins the Lease, becomes ready on the probe's
// path, mirrors a NetworkPolicy and a namespace created afterwards (so its
// watches are allowed too), and nothing it asked for was forbidden.
func testKubeControllers(t *testing.T, c *kubetest.Cluster, objs []*unstructured.Unstructured) {
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	find(t, objs, "Deployment", "calico-kube-controllers", &dep)
	find(t, objs, "ConfigMap", "calico-config", &cm)
	ctr := dep.Spec.Template.Spec.Containers[0]
	eps, files := etcdtest.StartTLS(t)
	sec := filepath.Join(t.TempDir(), "calico-secrets")
	secrets(t, sec, files)
	env := containerEnv(t, ctr, &cm, map[string]string{"metadata.name": "calico-kube-controllers-abc12", "metadata.namespace": "kube-system"},
		func(name, v string) string {
			if name == "ETCD_ENDPOINTS" {
				return eps[0]
			}
			return strings.Replace(v, "/calico-secrets", sec, 1)
		})
	port := freePort(t)
	probe := ctr.ReadinessProbe.HTTPGet
	if probe == nil || ctr.LivenessProbe.HTTPGet == nil || probe.Port.IntValue() != 9094 {
		t.Fatalf("probes: %+v %+v", ctr.ReadinessProbe, ctr.LivenessProbe)
	}
	// The health port is the manifest's 9094 in a pod; here another
	// test may hold it, so the test moves it.
	env = append(env, "KUBECONFIG="+kubeconfigFor(t, c, token(t, c, dep.Spec.Template.Spec.ServiceAccountName, nil)),
		"HEALTH_PORT="+strconv.Itoa(port), "PATH="+os.Getenv("PATH"))
	out := start(t, binary(t, "calico-kube-controllers", "github.com/palisade-net/palisade/kube-controllers/cmd/calico-kube-controllers"), nil, env)
	for _, path := range []string{ctr.LivenessProbe.HTTPGet.Path, probe.Path} {
		eventually(t, 60*time.Second, func() error {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", path, resp.Status)
			}
			return nil
		})
	}
	ctx := context.Background()
	lease, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, "calico-kube-controllers", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "calico-kube-controllers-abc12" {
		t.Fatalf("lease: %+v, %v", lease, err)
	}
	ns := "manifest-ns"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: eps, CACertFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Well inside the informers' resync: only a watch brings them.
	eventually(t, 10*time.Second, func() error {
		if _, err := store.Get(ctx, datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: ns, Name: k8s.PolicyName("deny")}); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		if _, err := store.Get(ctx, datastore.Key{Kind: v3.KindProfile, Name: k8s.NamespaceProfilePrefix + ns}); err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		return nil
	})
	if s := out.String(); strings.Contains(s, "forbidden") || strings.Contains(s, "Forbidden") {
		t.Errorf("calico-kube-controllers was refused something:\n%s", s)
	}
}

// testInstallCNI runs install-cni with the DaemonSet's install-cni
// environment in a temporary root laid out as the pod sees it (the host's
// CNI directories, the etcd Secret, a projected token bound to a
// calico-node pod). The plugin's own client, configured from the conflist
// it wrote, reads and annotates a pod under RBAC; when the token rotates
// and the old one is revoked, the kubeconfig already carries the new one.
func testInstallCNI(t *testing.T, c *kubetest.Cluster, objs []*unstructured.Unstructured) {
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	find(t, objs, "DaemonSet", "calico-node", &ds)
	find(t, objs, "ConfigMap", "calico-config", &cm)
	var ctr *corev1.Container
	for i := range ds.Spec.Template.Spec.InitContainers {
		if ds.Spec.Template.Spec.InitContainers[i].Name == "install-cni" {
			ctr = &ds.Spec.Template.Spec.InitContainers[i]
		}
	}
	if ctr == nil || len(ctr.Command) != 1 {
		t.Fatalf("no install-cni init container with a command in the DaemonSet")
	}
	ctx := context.Background()
	node, account := "node1", ds.Spec.Template.Spec.ServiceAccountName
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mkpod := func(ns, name, sa string) *corev1.Pod {
		p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := mkpod("default", "web", "default")
	nodePodA, nodePodB := mkpod("kube-system", "calico-node-a", account), mkpod("kube-system", "calico-node-b", account)

	root := t.TempDir()
	for _, d := range []string{install.SourceBinDir, install.HostBinDir, install.HostNetDir} {
		if err := os.MkdirAll(root+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The plugins of the calico-node image's /opt/cni/bin.
	plugins := []string{"calico", "calico-ipam", "portmap", "bandwidth"}
	for _, b := range plugins {
		if err := os.WriteFile(root+install.SourceBinDir+"/"+b, []byte("#!/bin/true "+b+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	eps, files := etcdtest.StartTLS(t)
	secrets(t, root+"/calico-secrets", files)
	ca, err := os.ReadFile(c.Files.CACert)
	if err != nil {
		t.Fatal(err)
	}
	tokA := token(t, c, account, nodePodA)
	if err := kubetest.Project(root+install.ServiceAccount, map[string]string{"token": tokA, "ca.crt": string(ca), "namespace": "kube-system"}); err != nil {
		t.Fatal(err)
	}

	host, port, _ := strings.Cut(strings.TrimPrefix(c.URL, "https://"), ":")
	netDir := root + install.HostNetDir
	env := containerEnv(t, *ctr, &cm, map[string]string{"spec.nodeName": node}, func(name, v string) string {
		if name == "ETCD_ENDPOINTS" {
			return eps[0]
		}
		return v
	})
	env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port, "CNI_NET_DIR="+netDir)
	bin := binary(t, filepath.Base(ctr.Command[0]), "github.com/palisade-net/palisade/cni-plugin/cmd/install-cni")
	out := start(t, bin, []string{"--root", root, "--poll-interval", "100ms"}, env)

	conflist := filepath.Join(netDir, "10-calico.conflist")
	eventually(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "watching the ServiceAccount token") {
			return fmt.Errorf("install not done")
		}
		_, err := os.Stat(conflist)
		return err
	})
	raw, err := os.ReadFile(conflist)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/10-calico.conflist", strings.NewReplacer(root, "<root>", eps[0], "<etcd>").Replace(string(raw)), *update)
	for _, b := range plugins {
		if got, _ := os.ReadFile(root + install.HostBinDir + "/" + b); string(got) != "#!/bin/true "+b+"\n" {
			t.Errorf("%s on the host: %q", b, got)
		}
	}
	checkChain(t, raw)

	// The plugin's view: the conflist's calico entry, as the runtime
	// hands it over.
	var list struct {
		Name, CNIVersion string
		Plugins          []map[string]any
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	plugin := list.Plugins[0]
	plugin["name"], plugin["cniVersion"] = list.Name, list.CNIVersion
	stdin, _ := json.Marshal(plugin)
	conf, err := netconf.Load(stdin)
	if err != nil {
		t.Fatalf("the plugin refuses the conflist: %v", err)
	}
	if conf.Nodename != node || conf.EtcdEndpoints != eps[0] {
		t.Errorf("conflist nodename %q, etcd %q", conf.Nodename, conf.EtcdEndpoints)
	}
	if _, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: []string{conf.EtcdEndpoints}, CACertFile: conf.EtcdCACertFile,
		CertFile: conf.EtcdCertFile, KeyFile: conf.EtcdKeyFile}); err != nil {
		t.Errorf("the conflist's etcd settings do not connect: %v", err)
	}
	asPlugin := func() error {
		kc, err := k8sapi.New(conf)
		if err != nil {
			return err
		}
		if _, err := kc.Pod(ctx, "default", web.Name); err != nil {
			return err
		}
		if _, err := kc.Namespace(ctx, "default"); err != nil {
			return err
		}
		if _, err := kc.Node(ctx, node); err != nil {
			return err
		}
		if err := kc.AnnotatePod(ctx, "default", web.Name, map[string]string{"cni.projectcalico.org/containerID": "c1"}); err != nil {
			return err
		}
		return kc.RemovePodAnnotations(ctx, "default", web.Name, "cni.projectcalico.org/containerID", "c1", "cni.projectcalico.org/containerID")
	}
	if err := asPlugin(); err != nil {
		t.Fatalf("the plugin with the installed kubeconfig: %v", err)
	}

	// The kubelet rotates the token; the old one is then revoked (its
	// pod deleted).
	tokB := token(t, c, account, nodePodB)
	if err := kubetest.Project(root+install.ServiceAccount, map[string]string{"token": tokB, "ca.crt": string(ca), "namespace": "kube-system"}); err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(netDir, install.KubeconfigName)
	eventually(t, 10*time.Second, func() error {
		cfg, err := clientcmd.LoadFromFile(kcPath)
		if err != nil {
			return err
		}
		if cfg.AuthInfos["calico"].Token != tokB {
			return fmt.Errorf("the kubeconfig still has the old token")
		}
		return nil
	})
	zero := int64(0)
	if err := c.Client.CoreV1().Pods("kube-system").Delete(ctx, nodePodA.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	old := kubeconfigFor(t, c, tokA)
	eventually(t, 30*time.Second, func() error {
		body, err := exec.Command(filepath.Join(c.Bin, "kubectl"), "--kubeconfig", old, "get", "--raw", "/api/v1/namespaces/default/pods/web").CombinedOutput()
		if err == nil {
			return fmt.Errorf("the revoked token still works: %s", body)
		}
		if !strings.Contains(string(body), "Unauthorized") {
			return fmt.Errorf("revoked token: %s", body)
		}
		return nil
	})
	if err := asPlugin(); err != nil {
		t.Errorf("the plugin after the rotation: %v", err)
	}
}

// checkChain: the runtime's CNI library reads the conflist as calico,
// then portmap (host ports, with SNAT for hairpin and localhost) and
// bandwidth (the pods' bandwidth annotations), as Calico's manifest
// chains them, each asking the runtime for its capability.
func checkChain(t *testing.T, raw []byte) {
	t.Helper()
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		t.Fatalf("libcni refuses the conflist: %v", err)
	}
	type want struct {
		typ, capability string
		snat            bool
	}
	wants := []want{{"calico", "", false}, {"portmap", "portMappings", true}, {"bandwidth", "bandwidth", false}}
	if len(list.Plugins) != len(wants) {
		t.Fatalf("the conflist chains %d plugins, want %v", len(list.Plugins), wants)
	}
	for i, w := range wants {
		var p struct {
			Type         string
			SNAT         *bool `json:"snat"`
			Capabilities map[string]bool
		}
		if err := json.Unmarshal(list.Plugins[i].Bytes, &p); err != nil {
			t.Fatal(err)
		}
		if p.Type != w.typ || (w.capability != "" && (len(p.Capabilities) != 1 || !p.Capabilities[w.capability])) ||
			(w.capability == "" && len(p.Capabilities) != 0) || (p.SNAT != nil && *p.SNAT) != w.snat {
			t.Errorf("plugin %d: %s", i, list.Plugins[i].Bytes)
		}
	}
}
