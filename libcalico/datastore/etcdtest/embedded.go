package etcdtest

import (
	"context"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
)

// fastConfig is an embedded etcd on loopback with free ports, tuned to
// elect itself in tens of milliseconds.
func fastConfig(t testing.TB, scheme string) embedded.Config {
	return embedded.Config{
		Name:          "test",
		DataDir:       t.TempDir(),
		ClientURLs:    []string{scheme + "://127.0.0.1:0"},
		PeerURLs:      []string{"http://127.0.0.1:0"},
		TickMs:        10,
		ElectionMs:    100,
		UnsafeNoFsync: true,
	}
}

// startEmbedded starts cfg and closes it when the test ends.
func startEmbedded(t testing.TB, cfg embedded.Config) []string {
	t.Helper()
	s, err := embedded.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("starting embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s.Endpoints()
}

// Start runs an embedded etcd for the test and returns its client
// endpoints. It is closed exactly once when the test ends.
func Start(t testing.TB) []string {
	t.Helper()
	return startEmbedded(t, fastConfig(t, "http"))
}

// StartTLS runs an embedded etcd that serves https only and requires a
// client certificate signed by the generated CA; files are in the test's
// temporary directory.
func StartTLS(t testing.TB) ([]string, TLSFiles) {
	t.Helper()
	files := GenerateTLS(t, t.TempDir())
	cfg := fastConfig(t, "https")
	cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile = files.ServerCert, files.ServerKey, files.CA
	return startEmbedded(t, cfg), files
}

// StartWith runs an embedded etcd like Start, with adjust applied to its
// configuration first (for example a short AuthTokenTTL).
func StartWith(t testing.TB, adjust func(*embedded.Config)) []string {
	t.Helper()
	cfg := fastConfig(t, "http")
	adjust(&cfg)
	return startEmbedded(t, cfg)
}
