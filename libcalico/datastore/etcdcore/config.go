package etcdcore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"
)

// DefaultDialTimeout bounds how long a client's New waits for etcd to
// answer.
const DefaultDialTimeout = 5 * time.Second

// Config says how to reach etcd; both clients take it.
type Config struct {
	// Endpoints are client URLs, e.g. "https://10.0.0.1:2379".
	Endpoints []string
	// Username and Password enable etcd's authentication.
	Username, Password string
	// KeyFile and CertFile are the client certificate for mutual TLS;
	// CACertFile the CA that signed the server's certificate.
	KeyFile, CertFile, CACertFile string
	// DialTimeout bounds New in total (connect, authenticate, first
	// read); DefaultDialTimeout when zero.
	DialTimeout time.Duration
}

// Timeout is the configured dial timeout or the default.
func (c Config) Timeout() time.Duration {
	if c.DialTimeout > 0 {
		return c.DialTimeout
	}
	return DefaultDialTimeout
}

// EndpointList names the endpoints in errors.
func (c Config) EndpointList() string {
	return strings.Join(c.Endpoints, ",")
}

// TLSConfig builds the client TLS settings from the files, or returns nil
// when no file is set and no endpoint is https.
func (c Config) TLSConfig() (*tls.Config, error) {
	https := false
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			https = true
		}
	}
	if c.CACertFile == "" && c.CertFile == "" && c.KeyFile == "" && !https {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACertFile != "" {
		pem, err := os.ReadFile(c.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("reading etcd CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA certificate %q holds no PEM certificate", c.CACertFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("etcd client certificate needs both a cert file and a key file (cert %q, key %q)", c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading etcd client certificate %q with key %q: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
