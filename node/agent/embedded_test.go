package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdpki"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/startup"
)

// TestEmbeddedEtcdIsClosedByDefault: calico-node's embedded etcd, started
// with no TLS setting, serves only clients with a certificate from the CA
// it made: the agent's own settings and the join file (with the gRPC
// client, and as files with the CNI plugins' lean client) get in; no
// certificate, a certificate from another CA, or plain HTTP are refused by
// the gRPC API and the JSON gateway alike. Its keys are mode 0600, and a
// restart keeps the CA, so a join file handed out stays good.
func TestEmbeddedEtcdIsClosedByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := filepath.Join(t.TempDir(), "etcd")
	o := Options{EtcdDataDir: dataDir, EtcdClientURLs: []string{"https://127.0.0.1:0"}, EtcdPeerURLs: []string{"https://127.0.0.1:0"}}
	node := startup.Config{NodeName: "node-a"}
	srv, own, err := startEmbedded(ctx, o, &node, nil)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := srv.Endpoints()[0]
	if !strings.HasPrefix(endpoint, "https://127.0.0.1:") {
		t.Fatalf("embedded etcd serves %s, want https", endpoint)
	}

	// Every secret is the owner's alone.
	joinPath := filepath.Join(dataDir, etcdpki.JoinFileName)
	files := etcdpki.In(filepath.Join(dataDir, EtcdTLSDir))
	for _, p := range []string{joinPath, files.CA, files.CAKey, files.ServerCert, files.ServerKey, files.ClientCert, files.ClientKey} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", p, st.Mode().Perm(), err)
		}
	}

	// The agent's own settings, the join file, and its content as files
	// for the lean client all get in.
	roundTrip(t, "the agent's own settings", func() (datastore.Interface, error) { return etcdv3.New(ctx, own) })
	joined, err := apiconfig.Load(joinPath, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if len(joined.Endpoints) != 1 || joined.Endpoints[0] != endpoint || joined.CACert == "" || joined.Cert == "" || joined.Key == "" {
		t.Fatalf("join file gives %+v, want %s with the CA and a client certificate inline", joined, endpoint)
	}
	roundTrip(t, "the join file", func() (datastore.Interface, error) { return etcdv3.New(ctx, joined) })
	spec, err := etcdpki.ReadJoin(joinPath)
	if err != nil {
		t.Fatal(err)
	}
	cni, err := etcdpki.WriteClientFiles(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	lean := etcdhttp.Config{Endpoints: joined.Endpoints, CACertFile: cni.CA, CertFile: cni.ClientCert, KeyFile: cni.ClientKey}
	roundTrip(t, "the lean client with the join file's certificates as files", func() (datastore.Interface, error) { return etcdhttp.New(ctx, lean) })

	// Everything else is refused, by the gRPC API and by the gateway.
	other := etcdtest.GenerateTLS(t, t.TempDir())
	for _, c := range []struct {
		name string
		cfg  etcdv3.Config
	}{
		{"no client certificate", etcdv3.Config{CACertFile: files.CA}},
		{"a client certificate from another CA", etcdv3.Config{CACertFile: files.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}},
	} {
		c.cfg.Endpoints, c.cfg.DialTimeout = []string{endpoint}, 2*time.Second
		if s, err := etcdv3.New(ctx, c.cfg); err == nil {
			s.Close()
			t.Errorf("gRPC with %s got in", c.name)
		}
		if s, err := etcdhttp.New(ctx, c.cfg); err == nil {
			s.Close()
			t.Errorf("the JSON gateway with %s let the lean client in", c.name)
		}
	}
	plain := strings.Replace(endpoint, "https://", "http://", 1)
	if s, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: []string{plain}, DialTimeout: 2 * time.Second}); err == nil {
		s.Close()
		t.Error("gRPC over plain HTTP got in")
	}
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(files.CA)
	pool.AppendCertsFromPEM(ca)
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for name, try := range map[string]func() (*http.Response, error){
		"over TLS without a client certificate": func() (*http.Response, error) {
			return noCert.Post(endpoint+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"Lw=="}`))
		},
		"over plain HTTP": func() (*http.Response, error) {
			return http.Post(plain+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"Lw=="}`))
		},
	} {
		resp, err := try()
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || strings.Contains(string(body), `"header"`) {
				t.Errorf("the JSON gateway answered a range %s: %s %s", name, resp.Status, body)
			}
		}
	}

	// A restart keeps the CA: the join file read before still gets in.
	srv.Close()
	o.EtcdClientURLs = []string{endpoint}
	srv, _, err = startEmbedded(ctx, o, &node, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	roundTrip(t, "the join file from before the restart", func() (datastore.Interface, error) { return etcdv3.New(ctx, joined) })
}

// TestEmbeddedEtcdPlainHTTPIsExplicit: an http:// URL for the embedded
// etcd is refused unless plain HTTP is asked for, and then it serves
// plain HTTP with a join file naming only the endpoints.
func TestEmbeddedEtcdPlainHTTPIsExplicit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := filepath.Join(t.TempDir(), "etcd")
	node := startup.Config{NodeName: "node-a"}
	o := Options{EtcdDataDir: dataDir, EtcdClientURLs: []string{"http://127.0.0.1:0"}, EtcdPeerURLs: []string{"http://127.0.0.1:0"}}
	if srv, _, err := startEmbedded(ctx, o, &node, nil); err == nil {
		srv.Close()
		t.Fatal("an http:// client URL was served without CALICO_ETCD_PLAINTEXT")
	} else if !strings.Contains(err.Error(), "CALICO_ETCD_PLAINTEXT=true") {
		t.Errorf("error %q does not name the setting", err)
	}
	o.EtcdPlaintext = true
	srv, own, err := startEmbedded(ctx, o, &node, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	roundTrip(t, "plain HTTP", func() (datastore.Interface, error) { return etcdv3.New(ctx, own) })
	spec, err := etcdpki.ReadJoin(filepath.Join(dataDir, etcdpki.JoinFileName))
	if err != nil || spec.EtcdEndpoints != srv.Endpoints()[0] || spec.EtcdCACert != "" || spec.EtcdKey != "" {
		t.Errorf("plain join file: %+v, %v", spec, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, EtcdTLSDir)); err == nil {
		t.Error("plain HTTP made certificates")
	}
}

// roundTrip connects and writes, reads back and deletes one key.
func roundTrip(t *testing.T, what string, open func() (datastore.Interface, error)) {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer s.Close()
	kv, ok := s.(interface{ KV() *etcdv3.KV })
	if !ok {
		t.Fatalf("%s: store %T has no KV", what, s)
	}
	ctx := context.Background()
	p, err := kv.KV().Create(ctx, datastore.KVPair{Key: "/calico/test/" + t.Name(), Value: []byte("v")})
	if err != nil {
		t.Fatalf("%s: writing: %v", what, err)
	}
	if _, err := kv.KV().Get(ctx, p.Key); err != nil {
		t.Fatalf("%s: reading: %v", what, err)
	}
	if err := kv.KV().Delete(ctx, p.Key, 0); err != nil {
		t.Fatalf("%s: deleting: %v", what, err)
	}
}

// TestDefaultJoinFile: calicoctl looks for the join file where
// calico-node writes it by default.
func TestDefaultJoinFile(t *testing.T) {
	if got := filepath.Join(DefaultEtcdDataDir, etcdpki.JoinFileName); got != apiconfig.DefaultJoinPath {
		t.Errorf("calico-node writes the join file at %s, calicoctl reads %s", got, apiconfig.DefaultJoinPath)
	}
}
