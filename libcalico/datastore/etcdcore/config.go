package etcdcore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
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
	// Key, Cert and CACert are the same as PEM data (calicoctl's inline
	// etcdKey, etcdCert and etcdCACert); each excludes its file.
	Key, Cert, CACert string
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

// TLSConfig builds the client TLS settings from the files or inline PEM,
// or returns nil when none is set and no endpoint is https.
func (c Config) TLSConfig() (*tls.Config, error) {
	https := false
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			https = true
		}
	}
	if c.CACertFile == "" && c.CertFile == "" && c.KeyFile == "" && c.CACert == "" && c.Cert == "" && c.Key == "" && !https {
		return nil, nil
	}
	ca, err := pemOf("etcd CA certificate", c.CACertFile, c.CACert)
	if err != nil {
		return nil, err
	}
	cert, err := pemOf("etcd client certificate", c.CertFile, c.Cert)
	if err != nil {
		return nil, err
	}
	key, err := pemOf("etcd client key", c.KeyFile, c.Key)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			if c.CACertFile != "" {
				return nil, fmt.Errorf("etcd CA certificate %q holds no PEM certificate", c.CACertFile)
			}
			return nil, errors.New("inline etcd CA certificate holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if (cert == nil) != (key == nil) {
		return nil, fmt.Errorf("etcd client certificate needs both a cert file and a key file (cert %q, key %q)", c.CertFile, c.KeyFile)
	}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("loading etcd client certificate %q with key %q: %w", or(c.CertFile, "inline"), or(c.KeyFile, "inline"), err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// pemOf reads file, or returns inline; nil when neither is set.
func pemOf(what, file, inline string) ([]byte, error) {
	switch {
	case file != "" && inline != "":
		return nil, fmt.Errorf("%s is given both as file %q and inline: give one", what, file)
	case inline != "":
		return []byte(inline), nil
	case file == "":
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return b, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
