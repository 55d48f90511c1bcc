package manifests

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/palisade-net/palisade/libcalico/golden"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const manifest = "calico-etcd.yaml"

// load reads a manifest's objects in order.
func load(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// find returns the object of a kind and name.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("the manifest has no %s %s", kind, name)
}

func writeObjects(t *testing.T, path string, objs []*unstructured.Unstructured) {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// binary is a Palisade binary: $PALISADE_BIN's, or one built for the
// test.
func binary(t *testing.T, name, pkg string) string {
	t.Helper()
	if d := os.Getenv("PALISADE_BIN"); d != "" {
		return filepath.Join(d, name)
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, b)
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestManifests applies calico-etcd.yaml to a real kube-apiserver that
// authorizes by RBAC, then checks the RBAC against what the code does and
// runs calico-kube-controllers and install-cni as the manifest runs them,
// with their ServiceAccounts' tokens.
func TestManifests(t *testing.T) {
	c := kubetest.StartRBAC(t)
	objs := load(t, manifest)
	var applied string
	if !t.Run("apply", func(t *testing.T) { applied = apply(t, c, objs) }) {
		t.FailNow()
	}
	t.Run("golden", func(t *testing.T) { checkApplied(t, applied, len(objs), "testdata/calico-etcd.applied.yaml") })
	t.Run("crds", func(t *testing.T) {
		// The network-policy-api CRDs apply cleanly (strict field
		// validation) beside the manifest.
		kubectl(t, c, "apply", "--server-side", "--field-manager=palisade-install", "-f", "network-policy-api-crds.yaml")
		kubectl(t, c, "wait", "--for=condition=Established", "--timeout=30s",
			"crd/adminnetworkpolicies.policy.networking.k8s.io", "crd/baselineadminnetworkpolicies.policy.networking.k8s.io")
	})
	t.Run("rbac", func(t *testing.T) { testRBAC(t, c) })
	t.Run("kube-controllers", func(t *testing.T) { testKubeControllers(t, c, objs) })
	t.Run("install-cni", func(t *testing.T) { testInstallCNI(t, c, objs) })
}

func kubectl(t *testing.T, c *kubetest.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// apply applies every object with server-side apply (strict field
// validation: an unknown or misspelt field fails), the DaemonSet and the
// Deployment as a server-side dry run (nothing here runs their pods), and
// returns what the API server made of them.
func apply(t *testing.T, c *kubetest.Cluster, objs []*unstructured.Unstructured) string {
	dir := t.TempDir()
	var base, workloads []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" || o.GetKind() == "Deployment" {
			workloads = append(workloads, o)
		} else {
			base = append(base, o)
		}
	}
	writeObjects(t, filepath.Join(dir, "base.yaml"), base)
	writeObjects(t, filepath.Join(dir, "workloads.yaml"), workloads)
	applied := kubectl(t, c, "apply", "--server-side", "--field-manager=palisade-install", "-o", "yaml", "-f", filepath.Join(dir, "base.yaml"))
	return applied + "\n---\n" + kubectl(t, c, "apply", "--server-side", "--field-manager=palisade-install", "--dry-run=server", "-o", "yaml", "-f", filepath.Join(dir, "workloads.yaml"))
}

// checkApplied compares the objects the API server returned, defaults and
// all, with the golden file.
func checkApplied(t *testing.T, applied string, want int, goldenFile string) {
	var out bytes.Buffer
	n := 0
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(applied), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		items := []any{m}
		if m["kind"] == "List" {
			items, _ = m["items"].([]any)
		}
		for _, it := range items {
			u := &unstructured.Unstructured{Object: it.(map[string]any)}
			for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields"} {
				unstructured.RemoveNestedField(u.Object, "metadata", f)
			}
			y, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString("---\n")
			out.Write(y)
			n++
		}
	}
	if n != want {
		t.Errorf("the API server returned %d objects, the manifest has %d", n, want)
	}
	golden.Check(t, goldenFile, out.String(), *update)
}

// perm is one thing a ServiceAccount may do.
type perm struct{ verb, group, resource, namespace, name string }

func (p perm) String() string {
	s := p.verb + " " + p.resource
	if p.group != "" {
		s += "." + p.group
	}
	if p.name != "" {
		s += "/" + p.name
	}
	if p.namespace != "" {
		s += " in " + p.namespace
	}
	return s
}

// needs lists what each component does with the API, read from the code:
//
//   - calico-kube-controllers (kube-controllers/run.go, controllers/):
//     informers (list, watch) over pods and nodes (node.go,
//     workloadendpoint.go), namespaces and service accounts (profiles.go)
//     NetworkPolicies (policy.go), AdminNetworkPolicies and
//     BaselineAdminNetworkPolicies with an update of their status
//     (adminpolicy.go), Services (loadbalancer.go) and
//     StatefulSets (node.go, sticky addresses); a merge patch of a
//     Service's status and the create of an Event on it (loadbalancer.go);
//     a Get of a node (node.go), of a pod (node.go, workloadendpoint.go)
//     and of a StatefulSet (node.go) to confirm it is gone; the
//     leader election's LeaseLock: get, create, update (release is an
//     update) of its Lease in kube-system; /readyz (every authenticated
//     user may).
//   - the CNI plugin, with calico-node's token (cni-plugin/k8sapi): get a
//     pod, its namespace, the node (usePodCidr); patch the pod's
//     annotations (merge patch on ADD, JSON patch on DEL).
//   - calico-node itself: informers (list, watch) over Services and
//     EndpointSlices for BGP service advertisement (node/bgp/services).
var needs = map[string][]perm{
	"calico-kube-controllers": {
		{"get", "", "pods", "", ""}, {"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""},
		{"get", "", "nodes", "", ""}, {"list", "", "nodes", "", ""}, {"watch", "", "nodes", "", ""},
		{"list", "", "namespaces", "", ""}, {"watch", "", "namespaces", "", ""},
		{"list", "", "serviceaccounts", "", ""}, {"watch", "", "serviceaccounts", "", ""},
		{"list", "", "services", "", ""}, {"watch", "", "services", "", ""},
		{"patch", "", "services/status", "", ""}, {"create", "", "events", "", ""},
		{"list", "networking.k8s.io", "networkpolicies", "", ""}, {"watch", "networking.k8s.io", "networkpolicies", "", ""},
		{"list", "policy.networking.k8s.io", "adminnetworkpolicies", "", ""}, {"watch", "policy.networking.k8s.io", "adminnetworkpolicies", "", ""},
		{"list", "policy.networking.k8s.io", "baselineadminnetworkpolicies", "", ""}, {"watch", "policy.networking.k8s.io", "baselineadminnetworkpolicies", "", ""},
		{"update", "policy.networking.k8s.io", "adminnetworkpolicies/status", "", ""}, {"update", "policy.networking.k8s.io", "baselineadminnetworkpolicies/status", "", ""},
		{"get", "apps", "statefulsets", "", ""}, {"list", "apps", "statefulsets", "", ""}, {"watch", "apps", "statefulsets", "", ""},
		{"create", "coordination.k8s.io", "leases", "kube-system", ""},
		{"get", "coordination.k8s.io", "leases", "kube-system", "calico-kube-controllers"},
		{"update", "coordination.k8s.io", "leases", "kube-system", "calico-kube-controllers"},
	},
	"calico-node": {
		{"get", "", "pods", "", ""}, {"patch", "", "pods", "", ""},
		{"get", "", "namespaces", "", ""}, {"get", "", "nodes", "", ""},
		{"list", "", "services", "", ""}, {"watch", "", "services", "", ""},
		{"list", "discovery.k8s.io", "endpointslices", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", ""},
	},
}

// nearMisses are things close to what the code does that it does not do:
// each must be refused.
var nearMisses = map[string][]perm{
	"calico-kube-controllers": {
		{"update", "", "pods", "default", ""}, {"patch", "", "nodes", "", ""}, {"delete", "", "nodes", "", ""},
		{"get", "", "secrets", "kube-system", ""}, {"get", "", "namespaces", "", "default"},
		{"update", "", "services", "default", ""}, {"patch", "", "services", "default", ""}, {"update", "", "services/status", "default", ""},
		{"patch", "", "events", "default", ""}, {"list", "", "endpoints", "", ""},
		{"create", "networking.k8s.io", "networkpolicies", "default", ""},
		{"update", "policy.networking.k8s.io", "adminnetworkpolicies", "", ""}, {"delete", "policy.networking.k8s.io", "baselineadminnetworkpolicies", "", ""},
		{"update", "coordination.k8s.io", "leases", "kube-system", "kube-controller-manager"},
		{"delete", "coordination.k8s.io", "leases", "kube-system", "calico-kube-controllers"},
		{"create", "coordination.k8s.io", "leases", "default", ""},
	},
	"calico-node": {
		{"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""}, {"update", "", "pods", "default", ""},
		{"patch", "", "pods", "default", "x"}, // allowed: patch is on every pod
		{"patch", "", "pods/status", "default", ""}, {"patch", "", "nodes", "", ""}, {"patch", "", "nodes/status", "", ""},
		{"get", "", "secrets", "kube-system", ""}, {"create", "", "serviceaccounts/token", "kube-system", "calico-node"},
		{"list", "", "namespaces", "", ""}, {"get", "", "services", "default", "web"},
		{"list", "", "endpoints", "", ""}, {"update", "discovery.k8s.io", "endpointslices", "default", ""},
	},
}

func sa(name string) string { return "system:serviceaccount:kube-system:" + name }

func allowed(t *testing.T, c *kubetest.Cluster, user string, p perm) bool {
	t.Helper()
	res, sub, _ := strings.Cut(p.resource, "/")
	r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: p.verb, Group: p.group, Resource: res, Subresource: sub, Namespace: p.namespace, Name: p.name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// rules are what RBAC grants user in namespace, as SelfSubjectRulesReview
// lists them, one "verb group/resource[/name]" each.
func rules(t *testing.T, c *kubetest.Cluster, user, namespace string) []string {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authzv1.SelfSubjectRulesReview{Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rule := range r.Status.ResourceRules {
		expandRule(rule.Verbs, rule.APIGroups, rule.Resources, rule.ResourceNames, func(v, g, res, n string) {
			s := v + " " + g + "/" + res
			if n != "" {
				s += "/" + n
			}
			out = append(out, s)
		})
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// testRBAC: each ServiceAccount may do what its code does (a
// SubjectAccessReview per need), is refused the near misses, and RBAC
// grants it nothing beyond: its rules, less those every ServiceAccount
// has, are exactly the needs. `kubectl auth can-i --list` is kept as a
// golden file for each.
func testRBAC(t *testing.T, c *kubetest.Cluster) {
	baseline := map[string][]string{}
	for _, ns := range []string{"kube-system", "default"} {
		baseline[ns] = rules(t, c, sa("palisade-nobody"), ns)
	}
	for name, ps := range needs {
		for _, p := range ps {
			if !allowed(t, c, sa(name), p) {
				t.Errorf("%s may not %s, which its code does", name, p)
			}
		}
		for _, p := range nearMisses[name] {
			want := p.verb == "patch" && p.resource == "pods" && name == "calico-node"
			if got := allowed(t, c, sa(name), p); got != want {
				t.Errorf("%s: %s allowed %v, want %v", name, p, got, want)
			}
		}
		for _, ns := range []string{"kube-system", "default"} {
			var want []string
			for _, p := range ps {
				if p.namespace != "" && p.namespace != ns {
					continue
				}
				s := p.verb + " " + p.group + "/" + p.resource
				if p.name != "" {
					s += "/" + p.name
				}
				want = append(want, s)
			}
			sort.Strings(want)
			var got []string
			for _, r := range rules(t, c, sa(name), ns) {
				if !slices.Contains(baseline[ns], r) {
					got = append(got, r)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s in %s: RBAC grants\n  %s\nthe code needs\n  %s", name, ns, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		}
		list := kubectl(t, c, "auth", "can-i", "--list", "--as="+sa(name), "-n", "kube-system")
		golden.Check(t, "testdata/can-i-"+name+".txt", list, *update)
	}
}

// token is a token of a ServiceAccount in kube-system, bound to a pod
// when pod is set (deleting the pod revokes it).
func token(t *testing.T, c *kubetest.Cluster, account string, pod *corev1.Pod) string {
	t.Helper()
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	r, err := c.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(context.Background(), account, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", account, err)
	}
	return r.Status.Token
}

// kubeconfigFor writes a kubeconfig with a bearer token.
func kubeconfigFor(t *testing.T, c *kubetest.Cluster, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority: %s\nusers:\n- name: u\n  user:\n    token: %s\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
		c.URL, c.Files.CACert, tok)
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// containerEnv resolves a container's environment as the kubelet would:
// values, ConfigMap keys (from cm) and field references (from fields);
// rewrite may change each result (paths into the test's directories).
func containerEnv(t *testing.T, ctr corev1.Container, cm *corev1.ConfigMap, fields map[string]string, rewrite func(name, v string) string) []string {
	t.Helper()
	var env []string
	for _, e := range ctr.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.ConfigMapKeyRef != nil:
				if f.ConfigMapKeyRef.Name != cm.Name {
					t.Fatalf("%s: %s names ConfigMap %s", ctr.Name, e.Name, f.ConfigMapKeyRef.Name)
				}
				var ok bool
				if v, ok = cm.Data[f.ConfigMapKeyRef.Key]; !ok {
					t.Fatalf("%s: %s names key %s, not in %s", ctr.Name, e.Name, f.ConfigMapKeyRef.Key, cm.Name)
				}
			case f.FieldRef != nil:
				var ok bool
				if v, ok = fields[f.FieldRef.FieldPath]; !ok {
					t.Fatalf("%s: %s: no value for field %s", ctr.Name, e.Name, f.FieldRef.FieldPath)
				}
			default:
				t.Fatalf("%s: %s: unsupported valueFrom", ctr.Name, e.Name)
			}
		}
		env = append(env, e.Name+"="+rewrite(e.Name, v))
	}
	return env
}
