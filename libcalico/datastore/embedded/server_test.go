package embedded_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
)

func TestStartServesAndClosesTwice(t *testing.T) {
	dir := t.TempDir()
	cfg := embedded.Config{
		Name: "node-1", DataDir: dir,
		ClientURLs: []string{"http://127.0.0.1:0"}, PeerURLs: []string{"http://127.0.0.1:0"},
		TickMs: 10, ElectionMs: 100, UnsafeNoFsync: true,
	}
	ctx := context.Background()
	s, err := embedded.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("Endpoints() = %v, want the real loopback port", eps)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Put(putCtx, "/calico/test", "v"); err != nil {
		t.Fatalf("put through %v: %v", eps, err)
	}
	s.Close()
	s.Close() // must not panic

	// The data survives a restart in the same directory.
	s2, err := embedded.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("restart in %s: %v", dir, err)
	}
	defer s2.Close()
	c2, err := clientv3.New(clientv3.Config{Endpoints: s2.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	resp, err := c2.Get(putCtx, "/calico/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %+v, %v", resp, err)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		name string
		cfg  embedded.Config
		want string
	}{
		{"no data dir", embedded.Config{}, "a data directory is required"},
		{"bad scheme", embedded.Config{DataDir: t.TempDir(), ClientURLs: []string{"unix://x"}}, `client URL "unix://x": scheme must be http or https`},
		{"port in use", embedded.Config{DataDir: t.TempDir(), ClientURLs: []string{"http://" + busy.Addr().String()}, PeerURLs: []string{"http://127.0.0.1:0"}}, "address already in use"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := embedded.Start(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("Start succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start error %q does not contain %q", err, tc.want)
			}
		})
	}
}
