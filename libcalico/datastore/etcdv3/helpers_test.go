package etcdv3_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// store is what both clients offer: resources and raw keys.
type store interface {
	datastore.Interface
	KV() *etcdv3.KV
}

// client is one way of talking to etcd: the gRPC client (etcdv3) or the
// lean one over etcd's JSON gateway (etcdhttp).
type client struct {
	name    string
	open    func(ctx context.Context, cfg etcdv3.Config) (store, error)
	watches bool
}

// clients lists both clients; every behavioural test runs against each.
func clients() []client {
	return []client{
		{name: "grpc", watches: true, open: func(ctx context.Context, cfg etcdv3.Config) (store, error) {
			s, err := etcdv3.New(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return s, nil
		}},
		{name: "http", open: func(ctx context.Context, cfg etcdv3.Config) (store, error) {
			s, err := etcdhttp.New(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return s, nil
		}},
	}
}

// connectWith opens a store with c on endpoints, closed when the test
// ends.
func connectWith(t testing.TB, c client, endpoints []string) store {
	t.Helper()
	s, err := c.open(testCtx(t), etcdv3.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("connecting the %s client to %v: %v", c.name, endpoints, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testCtx bounds every test operation.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a store on endpoints, closed when the test ends.
func connect(t testing.TB, endpoints []string) *etcdv3.Store {
	t.Helper()
	s, err := etcdv3.New(testCtx(t), etcdv3.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("connecting to %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// wipe removes every key so a subtest starts from an empty store.
func wipe(t testing.TB, s *etcdv3.Store) {
	t.Helper()
	if _, err := s.Client().Delete(testCtx(t), "/calico/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("wiping /calico/: %v", err)
	}
}

func pool(name, cidr string) *v3.IPPool {
	return &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr}}
}

func policy(ns, name, selector string) *v3.NetworkPolicy {
	return &v3.NetworkPolicy{
		ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v3.NetworkPolicySpec{Selector: selector},
	}
}

func netset(ns, name string, nets ...string) *v3.NetworkSet {
	return &v3.NetworkSet{ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: name}, Spec: v3.NetworkSetSpec{Nets: nets}}
}

// keyName is "ns/name" or "name".
func keyName(r v3.Resource) string {
	m := r.GetObjectMeta()
	if m.Namespace != "" {
		return m.Namespace + "/" + m.Name
	}
	return m.Name
}

// mustCreate creates r or fails the test.
func mustCreate(t testing.TB, s datastore.Interface, r v3.Resource) v3.Resource {
	t.Helper()
	out, err := s.Create(testCtx(t), r)
	if err != nil {
		t.Fatalf("creating %s: %v", keyName(r), err)
	}
	return out
}

// wantErr checks that err matches sentinel and has exactly message msg.
func wantErr(t testing.TB, what string, err, sentinel error, msg string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: error = %v, want one matching %v", what, err, sentinel)
	}
	if msg != "" && err.Error() != msg {
		t.Fatalf("%s: error message\n got %q\nwant %q", what, err.Error(), msg)
	}
}

// clonePool deep-copies a pool through JSON.
func clonePool(t testing.TB, p *v3.IPPool) *v3.IPPool {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out := &v3.IPPool{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}
