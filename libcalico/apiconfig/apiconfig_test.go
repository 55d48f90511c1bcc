package apiconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	seed := write("seed.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nmetadata:\nspec:\n  datastoreType: \"etcdv3\"\n  etcdEndpoints: \"http://10.96.232.136:6666\"\n")
	tls := write("tls.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  etcdEndpoints: \"https://a:2379, https://b:2379\"\n  etcdCACertFile: /ca.pem\n  etcdCertFile: /c.pem\n  etcdKeyFile: /k.pem\n  etcdUsername: u\n  etcdPassword: p\n")
	inline := write("join.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  datastoreType: etcdv3\n  etcdEndpoints: https://198.18.0.11:2379\n"+
		"  etcdCACert: |\n    CA PEM\n  etcdCert: |\n    CERT PEM\n  etcdKey: |\n    KEY PEM\n")
	cases := []struct {
		name    string
		path    string
		env     map[string]string
		want    etcdv3.Config
		wantErr string
	}{
		{name: "seed example", path: seed, want: etcdv3.Config{Endpoints: []string{"http://10.96.232.136:6666"}}},
		{name: "tls and auth, endpoints trimmed", path: tls, want: etcdv3.Config{Endpoints: []string{"https://a:2379", "https://b:2379"},
			Username: "u", Password: "p", KeyFile: "/k.pem", CertFile: "/c.pem", CACertFile: "/ca.pem"}},
		{name: "inline PEM, as in a join file", path: inline, want: etcdv3.Config{Endpoints: []string{"https://198.18.0.11:2379"},
			CACert: "CA PEM\n", Cert: "CERT PEM\n", Key: "KEY PEM\n"}},
		{name: "inline PEM from the environment", path: seed, env: map[string]string{"ETCD_CA_CERT": "ca", "CALICO_ETCD_CERT": "c", "ETCD_KEY": "k"},
			want: etcdv3.Config{Endpoints: []string{"http://10.96.232.136:6666"}, CACert: "ca", Cert: "c", Key: "k"}},
		{name: "environment overrides the file", path: seed, env: map[string]string{"ETCD_ENDPOINTS": "http://e:1", "CALICO_ETCD_USERNAME": "cu"},
			want: etcdv3.Config{Endpoints: []string{"http://e:1"}, Username: "cu"}},
		{name: "absent named file is an error", path: filepath.Join(dir, "absent"),
			wantErr: "reading config file " + filepath.Join(dir, "absent") + ": open " + filepath.Join(dir, "absent") + ": no such file or directory"},
		{name: "absent default file is fine; bare name wins over CALICO_ prefix", path: DefaultPath, env: map[string]string{"ETCD_ENDPOINTS": "http://bare:1", "CALICO_ETCD_ENDPOINTS": "http://prefixed:1"},
			want: etcdv3.Config{Endpoints: []string{"http://bare:1"}}},
		{name: "kubernetes datastore refused", path: seed, env: map[string]string{"DATASTORE_TYPE": "kubernetes"},
			wantErr: `datastore type "kubernetes" is not supported: Palisade stores its state in etcd, set datastoreType (or DATASTORE_TYPE) to etcdv3`},
		{name: "wrong kind", path: write("kind.cfg", "kind: IPPool\n"), wantErr: "config file " + filepath.Join(dir, "kind.cfg") + `: kind is "IPPool", want CalicoAPIConfig`},
		{name: "unknown field", path: write("field.cfg", "kind: CalicoAPIConfig\nspec:\n  etcdEndpoint: x\n"),
			wantErr: "config file " + filepath.Join(dir, "field.cfg") + `: error unmarshaling JSON: while decoding JSON: json: unknown field "etcdEndpoint"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.path == DefaultPath {
				if _, err := os.Stat(DefaultPath); err == nil {
					t.Skip(DefaultPath + " exists on this machine")
				}
			}
			got, err := Load(c.path, func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Load = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestLoadClient: with no file and no endpoint in the environment, a
// client falls back to the join file; a named file, or an endpoint in the
// environment, wins over it; no join file leaves the endpoints empty.
func TestLoadClient(t *testing.T) {
	if _, err := os.Stat(DefaultPath); err == nil {
		t.Skip(DefaultPath + " exists on this machine")
	}
	dir := t.TempDir()
	join := filepath.Join(dir, "join.cfg")
	if err := os.WriteFile(join, []byte("kind: CalicoAPIConfig\nspec:\n  etcdEndpoints: https://198.18.0.11:2379\n  etcdCACert: CA\n  etcdCert: C\n  etcdKey: K\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(dir, "named.cfg")
	if err := os.WriteFile(named, []byte("kind: CalicoAPIConfig\nspec:\n  etcdEndpoints: http://10.0.0.1:2379\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) string { return "" }
	for _, c := range []struct {
		name       string
		path, join string
		env        func(string) string
		want       etcdv3.Config
	}{
		{"the join file", DefaultPath, join, none, etcdv3.Config{Endpoints: []string{"https://198.18.0.11:2379"}, CACert: "CA", Cert: "C", Key: "K"}},
		{"a named file wins", named, join, none, etcdv3.Config{Endpoints: []string{"http://10.0.0.1:2379"}}},
		{"the environment wins", DefaultPath, join, func(k string) string {
			if k == "ETCD_ENDPOINTS" {
				return "http://e:1"
			}
			return ""
		}, etcdv3.Config{Endpoints: []string{"http://e:1"}}},
		{"no join file", DefaultPath, filepath.Join(dir, "absent"), none, etcdv3.Config{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := LoadClient(c.path, c.join, c.env)
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("LoadClient = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestKubeconfig: the kubeconfig comes from KUBECONFIG, CALICO_KUBECONFIG
// or spec.kubeconfig; the other Kubernetes connection fields are refused
// by name instead of being ignored.
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	named := write("named.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  kubeconfig: /etc/kube.conf\n")
	endpoint := write("endpoint.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  k8sAPIEndpoint: https://10.0.0.1:6443\n  k8sAPIToken: secret\n")
	qps := write("qps.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  kubeconfig: /etc/kube.conf\n  k8sClientQPS: 50\n")
	cases := []struct {
		name, path string
		env        map[string]string
		want       string
		wantErr    string
	}{
		{name: "spec.kubeconfig", path: named, want: "/etc/kube.conf"},
		{name: "KUBECONFIG wins", path: named, env: map[string]string{"KUBECONFIG": "/k", "CALICO_KUBECONFIG": "/c"}, want: "/k"},
		{name: "CALICO_KUBECONFIG", path: named, env: map[string]string{"CALICO_KUBECONFIG": "/c"}, want: "/c"},
		{name: "none named", path: write("empty.cfg", "kind: CalicoAPIConfig\n"), want: ""},
		{name: "endpoint and token refused", path: endpoint,
			wantErr: "config file " + endpoint + ": spec.k8sAPIEndpoint, spec.k8sAPIToken are not supported: Palisade reaches the Kubernetes API only through a kubeconfig file; set spec.kubeconfig or KUBECONFIG instead"},
		{name: "one field refused beside a kubeconfig", path: qps,
			wantErr: "config file " + qps + ": spec.k8sClientQPS is not supported: Palisade reaches the Kubernetes API only through a kubeconfig file; set spec.kubeconfig or KUBECONFIG instead"},
		{name: "refused even when KUBECONFIG is set", path: endpoint, env: map[string]string{"KUBECONFIG": "/k"},
			wantErr: "config file " + endpoint + ": spec.k8sAPIEndpoint, spec.k8sAPIToken are not supported: Palisade reaches the Kubernetes API only through a kubeconfig file; set spec.kubeconfig or KUBECONFIG instead"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Kubeconfig(c.path, func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Kubeconfig = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
