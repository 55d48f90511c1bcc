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
