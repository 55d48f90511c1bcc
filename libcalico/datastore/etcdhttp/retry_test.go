package etcdhttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// seeded starts an etcd holding /calico/ipam/v2/seed = "1", and a
// context that ends with the test (30 s at most).
func seeded(t *testing.T) ([]string, context.Context) {
	t.Helper()
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := etcdtest.NewStore(t, endpoints).Client().Put(ctx, "/calico/ipam/v2/seed", "1"); err != nil {
		t.Fatal(err)
	}
	return endpoints, ctx
}

// TestReadMovesOnFromALostMember: a member that dies while a read waits
// for its answer (the connection reset) costs the read nothing, which is
// sent to the next endpoint; a write lost the same way fails, naming the
// member, since it may have been applied.
func TestReadMovesOnFromALostMember(t *testing.T) {
	endpoints, ctx := seeded(t)

	// lose starts op through a store whose first endpoint is a relay,
	// resets the relay while op waits for its answer, and returns op's
	// error.
	lose := func(op func(datastore.KV) error) error {
		relay := etcdtest.StartRelay(t, endpoints[0])
		s, err := Open(Config{Endpoints: []string{relay.Endpoint(), endpoints[0]}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.KV().Get(ctx, "/calico/ipam/v2/seed"); err != nil {
			t.Fatalf("read through the relay: %v", err)
		}
		relay.Hang()
		done := make(chan error, 1)
		go func() { done <- op(s.KV()) }()
		time.Sleep(100 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("the request finished while its member hung: %v", err)
		default:
		}
		relay.Refuse()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not finish after its member went")
			return nil
		}
	}

	err := lose(func(kv datastore.KV) error {
		p, err := kv.Get(ctx, "/calico/ipam/v2/seed")
		if err == nil && string(p.Value) != "1" {
			t.Errorf("read %q, want \"1\"", p.Value)
		}
		return err
	})
	if err != nil {
		t.Errorf("a read whose member went while it waited: %v, want it answered by the next endpoint", err)
	}
	err = lose(func(kv datastore.KV) error {
		_, err := kv.Create(ctx, datastore.KVPair{Key: "/calico/ipam/v2/new", Value: []byte("2")})
		return err
	})
	if !errors.Is(err, datastore.ErrUnavailable) {
		t.Errorf("a write whose member went while it waited: %v, want ErrUnavailable (it may have been applied)", err)
	}
}

// TestReadWaitsOutAnElection: while etcd answers Unavailable (as during
// an election: "leader changed") a read is sent again until it is
// answered; a write is not, and fails with etcd's message. The election
// is etcd's own answer in its gateway's JSON, given by a front that
// passes every later request on to a real etcd.
func TestReadWaitsOutAnElection(t *testing.T) {
	endpoints, ctx := seeded(t)
	target, err := url.Parse(endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var electing, requests atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if electing.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":14,"message":"etcdserver: leader changed"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	s, err := Open(Config{Endpoints: []string{front.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	electing.Store(3)
	p, err := s.KV().Get(ctx, "/calico/ipam/v2/seed")
	if err != nil || string(p.Value) != "1" {
		t.Errorf("a read during an election: %q, %v; want \"1\" once it ends", p.Value, err)
	}
	if n := requests.Load(); n != 4 {
		t.Errorf("the read was sent %d times, want 4 (three answered Unavailable)", n)
	}

	requests.Store(0)
	electing.Store(1)
	_, err = s.KV().Create(ctx, datastore.KVPair{Key: "/calico/ipam/v2/new", Value: []byte("2")})
	if err == nil || !strings.Contains(err.Error(), "leader changed") {
		t.Errorf("a write during an election: %v, want etcd's \"leader changed\"", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the write was sent %d times, want once", n)
	}

	// An election that outlasts the dial timeout fails the read with
	// etcd's message.
	short, err := Open(Config{Endpoints: []string{front.URL}, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	electing.Store(1000)
	began := time.Now()
	_, err = short.KV().Get(ctx, "/calico/ipam/v2/seed")
	if err == nil || !strings.Contains(err.Error(), "leader changed") {
		t.Errorf("a read during an endless election: %v, want etcd's \"leader changed\"", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("a read during an endless election took %s, want it bounded by the 300ms dial timeout", took)
	}
}
