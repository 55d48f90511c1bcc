package etcdpki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEnsure: a first call makes a CA, a server certificate for the hosts
// and loopback, and a client certificate, every file mode 0600 in a 0700
// directory; a second keeps them all; a new address reissues only the
// server certificate, from the same CA; a CA about to expire is replaced
// with everything it signed.
func TestEnsure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	res, err := Ensure(dir, []string{"198.18.0.11", "node1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !res.NewCA || !res.NewServer || !res.NewClient {
		t.Fatalf("first Ensure made %+v, want everything", res)
	}
	f := res.Files
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	for _, p := range []string{f.CA, f.CAKey, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", p, st.Mode().Perm(), err)
		}
	}
	ca := readCA(t, f.CA)
	server := verify(t, f.ServerCert, f.ServerKey, ca, x509.ExtKeyUsageServerAuth)
	for _, h := range []string{"198.18.0.11", "127.0.0.1", "::1"} {
		if !containsIP(server.IPAddresses, h) {
			t.Errorf("server certificate lacks %s: %v", h, server.IPAddresses)
		}
	}
	if err := server.VerifyHostname("node1"); err != nil {
		t.Errorf("server certificate: %v", err)
	}
	client := verify(t, f.ClientCert, f.ClientKey, ca, x509.ExtKeyUsageClientAuth)
	if client.Subject.CommonName != ClientName {
		t.Errorf("client certificate CN %q, want %q", client.Subject.CommonName, ClientName)
	}

	before := snapshot(t, f)
	res, err = Ensure(dir, []string{"node1", "198.18.0.11"}, now.Add(time.Hour))
	if err != nil || res.NewCA || res.NewServer || res.NewClient {
		t.Fatalf("second Ensure made %+v (%v), want nothing", res, err)
	}
	if after := snapshot(t, f); !bytes.Equal(before, after) {
		t.Error("second Ensure changed the files")
	}

	res, err = Ensure(dir, []string{"198.18.0.11", "198.18.0.99"}, now.Add(2*time.Hour))
	if err != nil || res.NewCA || !res.NewServer || res.NewClient {
		t.Fatalf("Ensure with a new address made %+v (%v), want the server certificate only", res, err)
	}
	server = verifyAt(t, f.ServerCert, f.ServerKey, ca, x509.ExtKeyUsageServerAuth, now.Add(2*time.Hour))
	if !containsIP(server.IPAddresses, "198.18.0.99") {
		t.Errorf("reissued server certificate lacks the new address: %v", server.IPAddresses)
	}

	res, err = Ensure(dir, nil, ca.NotAfter.Add(-Renew/2))
	if err != nil || !res.NewCA || !res.NewServer || !res.NewClient {
		t.Fatalf("Ensure near the CA's expiry made %+v (%v), want everything new", res, err)
	}
	if readCA(t, f.CA).Equal(ca) {
		t.Error("the expiring CA was kept")
	}
}

// TestJoinFile: the join file carries the endpoints, the CA and the
// client pair inline, mode 0600; read back, its PEM data give a TLS
// client that trusts the server certificate; written out again as files,
// they are the same bytes.
func TestJoinFile(t *testing.T) {
	dir := t.TempDir()
	res, err := Ensure(filepath.Join(dir, "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, JoinFileName)
	if err := WriteJoin(path, []string{"https://198.18.0.11:2379"}, &res.Files); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("join file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	spec, err := ReadJoin(path)
	if err != nil {
		t.Fatal(err)
	}
	if spec.EtcdEndpoints != "https://198.18.0.11:2379" || spec.DatastoreType != "etcdv3" {
		t.Errorf("join file spec %+v", spec)
	}
	if _, err := tls.X509KeyPair([]byte(spec.EtcdCert), []byte(spec.EtcdKey)); err != nil {
		t.Errorf("join file's client pair: %v", err)
	}
	out, err := WriteClientFiles(filepath.Join(dir, "client"), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{out.CA, res.Files.CA}, {out.ClientCert, res.Files.ClientCert}, {out.ClientKey, res.Files.ClientKey}} {
		a, _ := os.ReadFile(p[0])
		b, _ := os.ReadFile(p[1])
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s", p[0], p[1])
		}
	}
	plain := filepath.Join(dir, "plain.cfg")
	if err := WriteJoin(plain, []string{"http://198.18.0.11:2379"}, nil); err != nil {
		t.Fatal(err)
	}
	plainSpec, err := ReadJoin(plain)
	if err != nil || plainSpec.EtcdCACert != "" || plainSpec.EtcdEndpoints != "http://198.18.0.11:2379" {
		t.Errorf("plain join file: %+v, %v", plainSpec, err)
	}
	if _, err := WriteClientFiles(filepath.Join(dir, "none"), plainSpec); err == nil {
		t.Error("WriteClientFiles of a join file without certificates succeeded")
	}
}

func readCA(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	c, err := readCert(path)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsCA {
		t.Fatalf("%s is not a CA", path)
	}
	return c
}

// verify loads a pair and checks it chains to ca for use.
func verify(t *testing.T, certFile, keyFile string, ca *x509.Certificate, use x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	return verifyAt(t, certFile, keyFile, ca, use, time.Now())
}

func verifyAt(t *testing.T, certFile, keyFile string, ca *x509.Certificate, use x509.ExtKeyUsage, at time.Time) *x509.Certificate {
	t.Helper()
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatalf("%s: %v", certFile, err)
	}
	c, err := readCert(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
		t.Fatalf("%s does not verify against the CA for %v: %v", certFile, use, err)
	}
	return c
}

func containsIP(ips []net.IP, s string) bool {
	for _, ip := range ips {
		if ip.Equal(net.ParseIP(s)) {
			return true
		}
	}
	return false
}

func snapshot(t *testing.T, f Files) []byte {
	t.Helper()
	var all []byte
	for _, p := range []string{f.CA, f.CAKey, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}
