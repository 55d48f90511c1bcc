package etcdv3_test

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// testListManyPages lists more resources than fit in several of List's
// pages: every one comes back once, in key order, with the namespace and
// all-namespaces scopes, at one revision that later writes do not move.
func testListManyPages(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	const count = 4321
	var ops []clientv3.Op
	codec := datastore.NewCodec()
	flush := func() {
		if _, err := raw.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range count {
		ns := fmt.Sprintf("ns-%d", i%3)
		set := netset(ns, fmt.Sprintf("set-%05d", i), "10.0.0.0/24")
		val, _, err := codec.Encode(set, fmt.Sprintf("uid-%d", i), v3.Time{})
		if err != nil {
			t.Fatal(err)
		}
		path, err := datastore.KeyPath(datastore.KeyOf(set))
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(path, string(val)))
		if len(ops) == 100 {
			flush()
		}
	}
	flush()

	all, rev, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != count {
		t.Fatalf("listed %d network sets, want %d", len(all), count)
	}
	seen := map[string]bool{}
	prev := ""
	for _, r := range all {
		k := keyName(r)
		if seen[k] || k <= prev {
			t.Fatalf("%s listed twice or out of order (after %s)", k, prev)
		}
		seen[k], prev = true, k
	}
	one, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet, Namespace: "ns-1"})
	if err != nil || len(one) != count/3 {
		t.Fatalf("namespace ns-1: %d network sets (%v), want %d", len(one), err, count/3)
	}
	mustCreate(t, s, netset("ns-0", "zz-later", "10.1.0.0/24"))
	again, rev2, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet})
	if err != nil || len(again) != count+1 || rev2 == rev {
		t.Fatalf("after one more create: %d items at revision %s (was %s), %v", len(again), rev2, rev, err)
	}
}
