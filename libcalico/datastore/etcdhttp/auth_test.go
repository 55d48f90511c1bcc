package etcdhttp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestTokenExpiry: when etcd forgets an idle token, the client logs in
// again and the request goes through.
func TestTokenExpiry(t *testing.T) {
	endpoints := etcdtest.StartWith(t, func(c *embedded.Config) { c.AuthTokenTTL = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := etcdtest.NewStore(t, endpoints).Client()
	etcdtest.EnableAuth(ctx, t, admin, "s3cret")
	s, err := New(ctx, Config{Endpoints: endpoints, Username: "root", Password: "s3cret"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	tr := s.KV()
	if _, err := tr.Create(ctx, datastore.KVPair{Key: "/calico/ipam/v2/t", Value: []byte("1")}); err != nil {
		t.Fatalf("create with a fresh token: %v", err)
	}

	// Leave the token idle past its TTL (etcd sweeps once a second): a
	// request that does not log in again is refused.
	time.Sleep(3 * time.Second)
	var resp rangeResponse
	err = s.tr.send(ctx, pathRange, rangeRequest{Key: []byte("/calico/ipam/v2/t")}, &resp, true)
	if ee := (*etcdError)(nil); !errors.As(err, &ee) || ee.Message != msgInvalidToken {
		t.Fatalf("request with the idle token: %v, want %q", err, msgInvalidToken)
	}
	got, err := tr.Get(ctx, "/calico/ipam/v2/t")
	if err != nil || string(got.Value) != "1" {
		t.Fatalf("get after the token expired: %q, %v", got.Value, err)
	}
}
