package install

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/libcalico/golden"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// root lays out a container's view in a temporary directory: the plugins
// to install, the host's directories, the etcd secret and a projected
// ServiceAccount token.
func root(t *testing.T) (string, Config) {
	t.Helper()
	r := t.TempDir()
	for _, d := range []string{SourceBinDir, HostBinDir, HostNetDir, "/calico-secrets"} {
		if err := os.MkdirAll(r+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, r+SourceBinDir+"/calico", "calico binary", 0o755)
	write(t, r+SourceBinDir+"/calico-ipam", "calico-ipam binary", 0o755)
	for _, n := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
		write(t, r+"/calico-secrets/"+n, n+" v1", 0o400)
	}
	project(t, r+ServiceAccount, map[string]string{"token": "token-1", "ca.crt": "CA-1", "namespace": "kube-system"})
	env := map[string]string{"KUBERNETES_NODE_NAME": "node1", "ETCD_ENDPOINTS": "https://198.18.0.1:2379",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "SLEEP": "false"}
	c, err := FromEnv(func(k string) string { return env[k] }, r)
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// project rotates the files of a projected volume as the kubelet does.
func project(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := kubetest.Project(dir, files); err != nil {
		t.Fatal(err)
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestInstall: binaries, certificates, kubeconfig and conflist land where
// the plugin and the runtime look, with the right modes and content.
func TestInstall(t *testing.T) {
	r, c := root(t)
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"calico", "calico-ipam"} {
		got, err := os.ReadFile(r + HostBinDir + "/" + b)
		if err != nil || string(got) != b+" binary" {
			t.Errorf("%s: %q, %v", b, got, err)
		}
		if m := mode(t, r+HostBinDir+"/"+b); m != 0o755 {
			t.Errorf("%s mode %v", b, m)
		}
	}
	for _, n := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
		p := r + HostNetDir + "/calico-tls/" + n
		if got, _ := os.ReadFile(p); string(got) != n+" v1" {
			t.Errorf("%s: %q", n, got)
		}
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s mode %v", n, m)
		}
	}
	if m := mode(t, r+HostNetDir+"/calico-tls"); m != 0o700 {
		t.Errorf("calico-tls mode %v", m)
	}
	kc := r + HostNetDir + "/" + KubeconfigName
	if m := mode(t, kc); m != 0o600 {
		t.Errorf("kubeconfig mode %v", m)
	}
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if cl.Server != "https://10.96.0.1:443" || string(cl.CertificateAuthorityData) != "CA-1" ||
		cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token != "token-1" {
		t.Errorf("kubeconfig: server %q, CA %q, token %q", cl.Server, cl.CertificateAuthorityData, cfg.AuthInfos["calico"].Token)
	}
	conf, err := os.ReadFile(r + HostNetDir + "/10-calico.conflist")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/default.conflist", string(conf), *update)
	leftovers, _ := filepath.Glob(r + HostNetDir + "/.*tmp*")
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// TestRefresh: a rotated token (and a changed secret) reach the host on
// the next Refresh; an unchanged one is not rewritten.
func TestRefresh(t *testing.T) {
	r, c := root(t)
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	kc := r + HostNetDir + "/" + KubeconfigName
	before, _ := os.Stat(kc)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(kc); !os.SameFile(before, after) {
		t.Error("an unchanged kubeconfig was rewritten")
	}
	project(t, r+ServiceAccount, map[string]string{"token": "token-2", "ca.crt": "CA-1", "namespace": "kube-system"})
	write(t, r+"/calico-secrets/etcd-cert", "etcd-cert v2", 0o400)
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	if tok := cfg.AuthInfos["calico"].Token; tok != "token-2" {
		t.Errorf("token after rotation: %q", tok)
	}
	if got, _ := os.ReadFile(r + HostNetDir + "/calico-tls/etcd-cert"); string(got) != "etcd-cert v2" {
		t.Errorf("etcd-cert after the secret changed: %q", got)
	}
}

// TestBinariesOptions: SKIP_CNI_BINARIES leaves a binary out,
// UPDATE_CNI_BINARIES=false keeps what the host has, the secondary bin
// directory gets them too when mounted, and no bin directory at all is an
// error.
func TestBinariesOptions(t *testing.T) {
	r, c := root(t)
	if err := os.MkdirAll(r+SecondaryBinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, r+HostBinDir+"/calico", "the host's own", 0o755)
	c.SkipBinaries, c.UpdateBinaries = []string{"calico-ipam"}, false
	if err := c.Install(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(r + HostBinDir + "/calico"); string(got) != "the host's own" {
		t.Errorf("UPDATE_CNI_BINARIES=false replaced calico: %q", got)
	}
	if got, _ := os.ReadFile(r + SecondaryBinDir + "/calico"); string(got) != "calico binary" {
		t.Errorf("secondary bin dir: %q", got)
	}
	for _, d := range []string{HostBinDir, SecondaryBinDir} {
		if _, err := os.Stat(r + d + "/calico-ipam"); err == nil {
			t.Errorf("skipped calico-ipam installed in %s", d)
		}
	}
	r2, c2 := root(t)
	if err := os.RemoveAll(r2 + HostBinDir); err != nil {
		t.Fatal(err)
	}
	if err := c2.Install(); err == nil || !strings.Contains(err.Error(), "no CNI bin directory") {
		t.Errorf("no bin directory: %v", err)
	}
}

// TestBadInput: a template or an environment install-cni cannot honour is
// an error naming what is wrong, and nothing is written.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl, want string
		noToken          bool
	}{
		{"unknown placeholder", `{"type":"calico","x":"__ETCD_DISCOVERY_SRV__"}`, "placeholder __ETCD_DISCOVERY_SRV__ is not one install-cni fills", false},
		{"token in the conflist", `{"type":"calico","policy":{"k8s_auth_token":"__SERVICEACCOUNT_TOKEN__"}}`, "__SERVICEACCOUNT_TOKEN__ would put the token in the conflist", false},
		{"not JSON", `{"type": "calico",`, "not a JSON object", false},
		{"kubeconfig without a token", `{"kubernetes":{"kubeconfig":"__KUBECONFIG_FILEPATH__"}}`, "no ServiceAccount token", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := root(t)
			c.NetworkConfig = tc.tmpl
			if tc.noToken {
				if err := os.RemoveAll(r + ServiceAccount); err != nil {
					t.Fatal(err)
				}
			}
			err := c.Install()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			for _, p := range []string{HostBinDir + "/calico", HostNetDir + "/10-calico.conflist", HostNetDir + "/" + KubeconfigName, HostNetDir + "/calico-tls"} {
				if _, err := os.Stat(r + p); err == nil {
					t.Errorf("%s written despite the error", p)
				}
			}
		})
	}
	for _, tc := range []struct{ env, want string }{
		{"SLEEP=maybe", `SLEEP "maybe": want true or false`},
		{"CNI_MTU=big", `CNI_MTU "big": not a number`},
		{"UPDATE_CNI_BINARIES=2", `UPDATE_CNI_BINARIES "2"`},
		{"CNI_NETWORK_CONFIG_FILE=/nonexistent", "CNI_NETWORK_CONFIG_FILE"},
	} {
		k, v, _ := strings.Cut(tc.env, "=")
		_, err := FromEnv(func(n string) string {
			if n == k {
				return v
			}
			return ""
		}, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.env, err, tc.want)
		}
	}
	// The kubeconfig needs the API server's address.
	_, c := root(t)
	c.KubernetesHost = ""
	if err := c.Install(); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no KUBERNETES_SERVICE_HOST: %v", err)
	}
}
