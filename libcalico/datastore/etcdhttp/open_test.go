package etcdhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestOpenUnreachable: Open makes no request, so it succeeds with nothing
// listening; the first request then fails as unavailable, naming the
// endpoint.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()

	s, err := Open(Config{Endpoints: []string{endpoint}, DialTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open(%s): %v", endpoint, err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.KV().Get(ctx, "/calico/ipam/v2/x")
	if !errors.Is(err, datastore.ErrUnavailable) || !strings.Contains(err.Error(), endpoint) {
		t.Fatalf("first request with nothing listening: %v, want ErrUnavailable naming %s", err, endpoint)
	}
	if _, err := Open(Config{Endpoints: []string{"127.0.0.1:2379"}}); err == nil || !strings.Contains(err.Error(), "is not a URL") {
		t.Errorf("Open with an endpoint that is not a URL: %v", err)
	}
}

// TestOpenAuthenticatesOnFirstRequest: with etcd auth on, a client from
// Open logs in on its first requests (concurrent ones included) and a
// wrong password fails them with etcd's refusal.
func TestOpenAuthenticatesOnFirstRequest(t *testing.T) {
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := etcdtest.NewStore(t, endpoints).Client()
	if _, err := admin.Put(ctx, "/calico/ipam/v2/seed", "1"); err != nil {
		t.Fatal(err)
	}
	etcdtest.EnableAuth(ctx, t, admin, "s3cret")

	s, err := Open(Config{Endpoints: endpoints, Username: "root", Password: "s3cret"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := s.KV().Get(ctx, "/calico/ipam/v2/seed")
			if err == nil && string(p.Value) != "1" {
				err = fmt.Errorf("read %q, want \"1\"", p.Value)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent first request %d: %v", i, err)
		}
	}

	bad, err := Open(Config{Endpoints: endpoints, Username: "root", Password: "wrong"})
	if err != nil {
		t.Fatalf("Open with a wrong password: %v (Open makes no request)", err)
	}
	defer bad.Close()
	if _, err := bad.KV().Get(ctx, "/calico/ipam/v2/seed"); err == nil || !strings.Contains(err.Error(), `authenticating as "root"`) {
		t.Errorf("request with a wrong password: %v, want an authentication failure", err)
	}
}
