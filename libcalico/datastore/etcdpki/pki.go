// Package etcdpki makes and keeps the certificates of an etcd that
// Palisade serves itself (calico-node's embedded etcd, the lab's etcd): a
// CA, a server certificate for the addresses etcd listens on, and the
// client certificate every Palisade component presents; and it writes the
// join file, the calicoctl-style configuration that carries the endpoints,
// the CA and the client certificate to other nodes. Every file is PEM,
// mode 0600, in one directory of mode 0700.
package etcdpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Validity of what Ensure issues. Certificates are renewed by Ensure when
// less than Renew is left.
const (
	Validity = 10 * 365 * 24 * time.Hour
	Renew    = 30 * 24 * time.Hour
)

// File names in the directory.
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client.pem"
	ClientKeyFile  = "client-key.pem"
)

// ClientName is the common name of the client certificate (the user name
// etcd sees when it maps certificates to users).
const ClientName = "palisade"

// Files are the paths of a directory's PEM files.
type Files struct {
	Dir                   string
	CA, CAKey             string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// In names the files of dir.
func In(dir string) Files {
	p := func(name string) string { return filepath.Join(dir, name) }
	return Files{Dir: dir, CA: p(CAFile), CAKey: p(CAKeyFile), ServerCert: p(ServerCertFile), ServerKey: p(ServerKeyFile),
		ClientCert: p(ClientCertFile), ClientKey: p(ClientKeyFile)}
}

// Result says what Ensure had to make.
type Result struct {
	Files Files
	// NewCA is set when there was no usable CA and a new one was made:
	// every join file handed out before is void.
	NewCA bool
	// NewServer and NewClient are set when that certificate was (re)issued.
	NewServer, NewClient bool
}

// Ensure makes sure dir holds a CA, a server certificate valid for hosts
// (IP addresses or DNS names; 127.0.0.1, ::1 and localhost are always
// added) and a client certificate, all valid for a while yet. It keeps
// what is there and usable: an existing CA is never replaced while its
// key and certificate load, so join files handed out stay good; the
// server certificate is issued again when an address was added.
func Ensure(dir string, hosts []string, now time.Time) (Result, error) {
	f := In(dir)
	res := Result{Files: f}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, fmt.Errorf("etcd certificates in %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return res, fmt.Errorf("etcd certificates in %s: %w", dir, err)
	}
	ca, caKey, err := loadPair(f.CA, f.CAKey)
	if err != nil || !ca.IsCA || now.Add(Renew).After(ca.NotAfter) {
		if ca, caKey, err = newCA(now); err != nil {
			return res, err
		}
		if err := writePair(f.CA, f.CAKey, ca.Raw, caKey); err != nil {
			return res, err
		}
		res.NewCA = true
	}
	ips, names := sans(hosts)
	if res.NewCA || !usable(f.ServerCert, f.ServerKey, ca, now, x509.ExtKeyUsageServerAuth, ips, names) {
		if err := issue(f.ServerCert, f.ServerKey, ca, caKey, now, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "etcd"},
			IPAddresses: ips, DNSNames: names,
			// etcd dials itself with its server certificate (its JSON
			// gateway, its peers), so it is a client certificate too.
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}); err != nil {
			return res, err
		}
		res.NewServer = true
	}
	if res.NewCA || !usable(f.ClientCert, f.ClientKey, ca, now, x509.ExtKeyUsageClientAuth, nil, nil) {
		if err := issue(f.ClientCert, f.ClientKey, ca, caKey, now, &x509.Certificate{
			Subject:     pkix.Name{CommonName: ClientName},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}); err != nil {
			return res, err
		}
		res.NewClient = true
	}
	return res, nil
}

// sans splits hosts into addresses and names, with loopback added.
func sans(hosts []string) ([]net.IP, []string) {
	var ips []net.IP
	names := []string{"localhost"}
	for _, h := range append([]string{"127.0.0.1", "::1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return ips, names
}

// usable says whether the pair loads, is signed by ca, has use, covers
// every address and name, and is valid for a while yet.
func usable(certFile, keyFile string, ca *x509.Certificate, now time.Time, use x509.ExtKeyUsage, ips []net.IP, names []string) bool {
	cert, _, err := loadPair(certFile, keyFile)
	if err != nil || now.Add(Renew).After(cert.NotAfter) || now.Before(cert.NotBefore) || cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	if !slices.Contains(cert.ExtKeyUsage, use) {
		return false
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, n := range names {
		if !slices.Contains(cert.DNSNames, n) {
			return false
		}
	}
	return true
}

// newCA makes a self-signed CA.
func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd CA: generating its key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Palisade etcd CA", Organization: []string{"Palisade"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// issue signs tmpl with the CA and writes the pair.
func issue(certFile, keyFile string, ca *x509.Certificate, caKey crypto.Signer, now time.Time, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("%s: generating its key: %w", certFile, err)
	}
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(Validity)
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("%s: %w", certFile, err)
	}
	return writePair(certFile, keyFile, der, key)
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial number: %w", err)
	}
	return n, nil
}

// loadPair reads a certificate and its ECDSA key and checks they belong
// together.
func loadPair(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := readCert(certFile)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, fmt.Errorf("%s holds no PEM key", keyFile)
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("%s is not the key of %s", keyFile, certFile)
	}
	return cert, key, nil
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

// writePair writes a certificate and its key, each replaced atomically,
// mode 0600.
func writePair(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	return writeFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// writeFile replaces path atomically with data, mode 0600.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an old .tmp keeps its mode
		return errors.Join(fmt.Errorf("writing %s: %w", path, err), os.Remove(tmp))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
