package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// TestEtcdProxyManifest reads calico-etcd-proxy.yaml strictly (every
// field one Kubernetes knows), checks that the Service reaches the port
// the proxy listens on, and runs calico-etcd-proxy with the Deployment's
// command line and environment (paths moved into the test's directory)
// against a TLS etcd: an agent with the etcd client certificate reads
// through it, one without is refused.
func TestEtcdProxyManifest(t *testing.T) {
	objs := load(t, "calico-etcd-proxy.yaml")
	var dep appsv1.Deployment
	var svc corev1.Service
	var pdb policyv1.PodDisruptionBudget
	var sec corev1.Secret
	for _, o := range objs {
		var into any
		switch o.GetKind() {
		case "Deployment":
			into = &dep
		case "Service":
			into = &svc
		case "PodDisruptionBudget":
			into = &pdb
		case "Secret":
			into = &sec
		default:
			t.Fatalf("unexpected %s %s", o.GetKind(), o.GetName())
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	spec := dep.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Containers) != 1 {
		t.Fatalf("the proxy must run on the host's network (calico-node needs it before pod networking), one container: %+v", spec)
	}
	ctr := spec.Containers[0]
	if len(ctr.Command) == 0 || ctr.Command[0] != "/bin/calico-etcd-proxy" {
		t.Fatalf("command %v", ctr.Command)
	}
	if len(svc.Spec.Ports) != 1 || len(ctr.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != ctr.Ports[0].Name ||
		!strings.Contains(strings.Join(ctr.Command, " "), fmt.Sprintf("--listen-addr=0.0.0.0:%d ", ctr.Ports[0].ContainerPort)) {
		t.Fatalf("Service port %+v does not reach the proxy's %+v (command %v)", svc.Spec.Ports, ctr.Ports, ctr.Command)
	}
	if svc.Spec.Selector["k8s-app"] != "calico-etcd-proxy" || pdb.Spec.Selector.MatchLabels["k8s-app"] != "calico-etcd-proxy" {
		t.Fatalf("the Service or budget selects %v / %v", svc.Spec.Selector, pdb.Spec.Selector)
	}

	var cm corev1.ConfigMap
	find(t, load(t, manifest), "ConfigMap", "calico-config", &cm)
	eps, files := etcdtest.StartTLS(t)
	dir := t.TempDir()
	etcdSecrets := filepath.Join(dir, "calico-secrets")
	secrets(t, etcdSecrets, files)
	proxyTLS := filepath.Join(dir, "calico-etcd-proxy-tls")
	if err := os.MkdirAll(proxyTLS, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"tls.crt": files.ServerCert, "tls.key": files.ServerKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proxyTLS, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	env := containerEnv(t, ctr, &cm, nil, func(name, v string) string {
		if name == "ETCD_ENDPOINTS" {
			return eps[0]
		}
		return strings.Replace(v, "/calico-secrets", etcdSecrets, 1)
	})
	port := freePort(t)
	var args []string
	for _, a := range ctr.Command[1:] {
		a = strings.Replace(a, "/calico-secrets", etcdSecrets, 1)
		a = strings.Replace(a, "/calico-etcd-proxy-tls", proxyTLS, 1)
		if strings.HasPrefix(a, "--listen-addr=") {
			// Another test may hold the manifest's port.
			a = fmt.Sprintf("--listen-addr=127.0.0.1:%d", port)
		}
		args = append(args, a)
	}
	out := start(t, binary(t, "calico-etcd-proxy", "github.com/palisade-net/palisade/libcalico/datastore/etcdproxy/cmd/calico-etcd-proxy"), args, env)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	via := []string{fmt.Sprintf("https://127.0.0.1:%d", port)}
	var agent *etcdv3.Store
	eventually(t, 20*time.Second, func() error {
		var err error
		agent, err = etcdv3.New(ctx, etcdv3.Config{Endpoints: via, CACertFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey, DialTimeout: 2 * time.Second})
		if err != nil {
			return fmt.Errorf("%w (proxy output: %s)", err, out.String())
		}
		return nil
	})
	defer agent.Close()
	if _, err := agent.Create(ctx, &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "via-proxy"}, Spec: v3.IPPoolSpec{CIDR: "10.9.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	direct, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: eps, CACertFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "via-proxy"}); err != nil {
		t.Fatalf("written through the proxy, not in etcd: %v", err)
	}
	if s, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: via, CACertFile: files.CA, DialTimeout: 2 * time.Second}); err == nil {
		s.Close()
		t.Fatal("a client without a certificate got through the proxy")
	}
}
