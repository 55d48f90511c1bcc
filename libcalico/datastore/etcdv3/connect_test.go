package etcdv3_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// roundTrip proves a store works: create, read back, delete.
func roundTrip(t *testing.T, s store) {
	t.Helper()
	ctx := testCtx(t)
	created := mustCreate(t, s, pool("pool-a", "10.1.0.0/16"))
	got, err := s.Get(ctx, datastore.KeyOf(created))
	if err != nil || got.GetObjectMeta().UID != created.GetObjectMeta().UID {
		t.Fatalf("get back: %+v, %v", got, err)
	}
	if _, err := s.Delete(ctx, datastore.KeyOf(created), ""); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

// TestTLS connects both clients over mutual TLS, to the embedded etcd and
// to the system one, and checks each way of getting TLS wrong.
func TestTLS(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testTLS(t, etcdtest.StartTLS) })
	t.Run("external", func(t *testing.T) { testTLS(t, etcdtest.StartExternalTLS) })
}

func testTLS(t *testing.T, start func(testing.TB) ([]string, etcdtest.TLSFiles)) {
	endpoints, files := start(t)
	if !strings.HasPrefix(endpoints[0], "https://") {
		t.Fatalf("TLS server endpoint %q is not https", endpoints[0])
	}
	other := etcdtest.GenerateTLS(t, t.TempDir()) // a CA the server does not trust
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name string
		cfg  etcdv3.Config
		// wantErr holds substrings one of which the error must contain
		// (servers built with older Go send "bad certificate" for any
		// rejected client certificate); empty = must work.
		wantErr []string
	}{
		{"CA and client certificate", etcdv3.Config{CACertFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}, nil},
		{"inline CA and client certificate (a join file's)", etcdv3.Config{CACert: read(files.CA), Cert: read(files.ClientCert), Key: read(files.ClientKey)}, nil},
		{"CA as a file and inline", etcdv3.Config{CACertFile: files.CA, CACert: read(files.CA)}, []string{"etcd CA certificate is given both as file"}},
		{"no client certificate", etcdv3.Config{CACertFile: files.CA}, []string{"tls: certificate required", "tls: bad certificate"}},
		{"client certificate from an unknown CA", etcdv3.Config{CACertFile: files.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}, []string{"tls: unknown certificate authority", "tls: bad certificate"}},
		{"server not signed by the given CA", etcdv3.Config{CACertFile: other.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}, []string{"certificate signed by unknown authority"}},
		{"cert without key", etcdv3.Config{CACertFile: files.CA, CertFile: files.ClientCert}, []string{"needs both a cert file and a key file"}},
		{"missing CA file", etcdv3.Config{CACertFile: files.CA + ".missing"}, []string{"reading etcd CA certificate"}},
	}
	for _, c := range clients() {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				cfg := tc.cfg
				cfg.Endpoints = endpoints
				cfg.DialTimeout = 2 * time.Second
				start := time.Now()
				s, err := c.open(context.Background(), cfg)
				if len(tc.wantErr) == 0 {
					if err != nil {
						t.Fatalf("New: %v", err)
					}
					defer s.Close()
					roundTrip(t, s)
					return
				}
				if err == nil {
					s.Close()
					t.Fatalf("New succeeded, want an error containing %q", tc.wantErr)
				}
				if !slices.ContainsFunc(tc.wantErr, func(w string) bool { return strings.Contains(err.Error(), w) }) ||
					!strings.Contains(err.Error(), endpoints[0]) {
					t.Fatalf("New error %q does not contain one of %q and the endpoint", err, tc.wantErr)
				}
				// A TLS setting the server rejects cannot get better by
				// waiting: New must give up at once, not at its deadline.
				if d := time.Since(start); d > 1500*time.Millisecond {
					t.Fatalf("New took %s to fail", d)
				}
			})
		}
	}
}

// TestUsernamePassword logs in with both clients, on the embedded etcd
// and on the system one (whose gateway is an older grpc-gateway).
func TestUsernamePassword(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testUsernamePassword(t, etcdtest.Start(t)) })
	t.Run("external", func(t *testing.T) { testUsernamePassword(t, etcdtest.StartExternal(t)) })
}

func testUsernamePassword(t *testing.T, endpoints []string) {
	ctx := testCtx(t)
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	etcdtest.EnableAuth(ctx, t, admin, "s3cret")
	cases := []struct {
		name, user, password string
		wantErr              string
	}{
		{"right password", "root", "s3cret", ""},
		{"wrong password", "root", "nope", "authentication failed"},
		{"no credentials", "", "", "user name is empty"},
	}
	for _, c := range clients() {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				s, err := c.open(ctx, etcdv3.Config{Endpoints: endpoints, Username: tc.user, Password: tc.password, DialTimeout: 2 * time.Second})
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("New: %v", err)
					}
					defer s.Close()
					roundTrip(t, s)
					return
				}
				if err == nil {
					s.Close()
					t.Fatalf("New succeeded, want an error containing %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), endpoints[0]) {
					t.Fatalf("New error %q does not contain %q and the endpoint", err, tc.wantErr)
				}
			})
		}
	}
}

// deadEndpoint is the URL of a loopback port nobody listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

func TestUnreachable(t *testing.T) {
	endpoint := deadEndpoint(t)

	start := time.Now()
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: []string{endpoint}})
	elapsed := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatalf("New(%s) succeeded with nothing listening", endpoint)
	}
	if !strings.Contains(err.Error(), endpoint) {
		t.Errorf("error %q does not name the endpoint %s", err, endpoint)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q does not say the connection was refused", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q is not a deadline error", err)
	}
	if elapsed < etcdv3.DefaultDialTimeout-time.Second || elapsed > etcdv3.DefaultDialTimeout+2*time.Second {
		t.Errorf("New gave up after %s, want about %s", elapsed, etcdv3.DefaultDialTimeout)
	}
	t.Logf("unreachable etcd: %v (after %s)", err, elapsed.Round(time.Millisecond))

	// The caller's context bounds it too.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: []string{endpoint}}); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("New with a 300ms context: %v after %s", err, time.Since(start))
	}
}

// TestUnreachableLean: the lean client fails at once on a refused
// connection and within its dial timeout on a server that never answers,
// naming the endpoint either way.
func TestUnreachableLean(t *testing.T) {
	// A listener that accepts connections and never answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dead1, dead2 := deadEndpoint(t), deadEndpoint(t)
	cases := []struct {
		name      string
		endpoints []string
		timeout   time.Duration
		want      string
		within    time.Duration
		// unavailable: the error matches datastore.ErrUnavailable (try
		// again later), unlike a configuration mistake.
		unavailable bool
	}{
		{"nothing listening", []string{dead1}, 0, "connection refused", time.Second, true},
		{"nothing listening on either", []string{dead1, dead2}, 0, "no endpoint answered", time.Second, true},
		{"no answer", []string{"http://" + mute.Addr().String()}, time.Second, "no answer within 1s", 2500 * time.Millisecond, true},
		{"not a URL", []string{"127.0.0.1:2379"}, 0, "is not a URL", 100 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := etcdhttp.New(context.Background(), etcdv3.Config{Endpoints: tc.endpoints, DialTimeout: tc.timeout})
			elapsed := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatalf("New(%v) succeeded", tc.endpoints)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			for _, ep := range tc.endpoints {
				if !strings.Contains(err.Error(), ep) {
					t.Errorf("error %q does not name the endpoint %s", err, ep)
				}
			}
			if elapsed > tc.within {
				t.Errorf("New gave up after %s, want within %s", elapsed, tc.within)
			}
			if got := errors.Is(err, datastore.ErrUnavailable); got != tc.unavailable {
				t.Errorf("errors.Is(%q, ErrUnavailable) = %v, want %v", err, got, tc.unavailable)
			}
			t.Logf("%v (after %s)", err, elapsed.Round(time.Millisecond))
		})
	}
}

// TestFirstEndpointDown: with a dead endpoint listed first, both clients
// reach etcd through the next one.
func TestFirstEndpointDown(t *testing.T) {
	endpoints := append([]string{deadEndpoint(t)}, etcdtest.Start(t)...)
	for _, c := range clients() {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.open(testCtx(t), etcdv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second})
			if err != nil {
				t.Fatalf("New(%v): %v", endpoints, err)
			}
			defer s.Close()
			roundTrip(t, s)
		})
	}
}
