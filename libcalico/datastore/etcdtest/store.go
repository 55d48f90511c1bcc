package etcdtest

import (
	"context"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// NewStore connects an etcdv3 store to endpoints and closes it when the
// test ends.
func NewStore(t testing.TB, endpoints []string) *etcdv3.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("connecting to etcd at %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
