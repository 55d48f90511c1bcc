package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// newClient starts an embedded etcd and returns a client over it.
func newClient(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: etcdtest.Start(t)})
	if err != nil {
		t.Fatalf("connecting to embedded etcd: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return client.New(store), ctx
}

func pool(name, cidr string) *v3.IPPool {
	return &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr}}
}

func netset(ns, name string, nets ...string) *v3.NetworkSet {
	return &v3.NetworkSet{ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: name}, Spec: v3.NetworkSetSpec{Nets: nets}}
}

// TestWriteRules runs each case on a fresh store holding pool "a"
// (10.0.0.0/16) and checks the error (or success) and what is stored.
func TestWriteRules(t *testing.T) {
	cases := []struct {
		name    string
		op      client.Op
		r       v3.Resource
		wantIs  error  // sentinel the error must match; nil for success
		wantMsg string // substring of the error
	}{
		{"overlapping pool", client.OpCreate, pool("b", "10.0.1.0/24"), client.ErrOverlap,
			`IPPool "b" (10.0.1.0/24) overlaps IPPool "a" (10.0.0.0/16)`},
		{"disjoint pool", client.OpCreate, pool("b", "10.1.0.0/16"), nil, ""},
		{"cidr change", client.OpUpdate, pool("a", "10.1.0.0/16"), client.ErrImmutable,
			`IPPool "a": spec.cidr is immutable: cannot change 10.0.0.0/16 to 10.1.0.0/16`},
		{"cidr change by apply", client.OpApply, pool("a", "10.1.0.0/16"), client.ErrImmutable,
			`spec.cidr is immutable`},
		{"same cidr update", client.OpUpdate, pool("a", "10.0.0.0/16"), nil, ""},
		{"namespace on cluster kind", client.OpCreate,
			&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "n", Namespace: "x"}, Spec: v3.IPPoolSpec{CIDR: "10.9.0.0/16"}},
			client.ErrScope, `IPPool "n": metadata.namespace "x" given, but IPPool is not namespaced`},
		{"create existing", client.OpCreate, pool("a", "10.0.0.0/16"), datastore.ErrAlreadyExists, `ippool "a"`},
		{"update missing", client.OpUpdate, pool("zz", "10.7.0.0/16"), datastore.ErrNotFound, `ippool "zz"`},
		{"missing name", client.OpCreate, pool("", "10.8.0.0/16"), client.ErrInvalid, "metadata.name is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, ctx := newClient(t)
			if _, err := c.Create(ctx, pool("a", "10.0.0.0/16")); err != nil {
				t.Fatalf("creating pool a: %v", err)
			}
			res := c.Write(ctx, tc.op, []v3.Resource{tc.r})[0]
			if tc.wantIs == nil {
				if res.Err != nil {
					t.Fatalf("%s %s: unexpected error %v", tc.op, tc.r.GetObjectMeta().Name, res.Err)
				}
				if res.Resource.GetObjectMeta().ResourceVersion == "" {
					t.Errorf("stored resource has no resourceVersion")
				}
				return
			}
			if !errors.Is(res.Err, tc.wantIs) {
				t.Fatalf("%s %s: error %v, want one matching %v", tc.op, tc.r.GetObjectMeta().Name, res.Err, tc.wantIs)
			}
			if !strings.Contains(res.Err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not contain %q", res.Err, tc.wantMsg)
			}
			got, err := c.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "a"})
			if err != nil || got.(*v3.IPPool).Spec.CIDR != "10.0.0.0/16" {
				t.Errorf("pool a after a refused write: %v, %v", got, err)
			}
		})
	}
}

func TestNamespaceDefaultAndApplyKeepsIdentity(t *testing.T) {
	c, ctx := newClient(t)
	created, err := c.Apply(ctx, netset("", "web", "10.0.0.0/24"))
	if err != nil {
		t.Fatalf("apply netset: %v", err)
	}
	m := created.GetObjectMeta()
	if m.Namespace != client.DefaultNamespace || m.UID == "" {
		t.Fatalf("created netset: namespace %q uid %q, want namespace default and a uid", m.Namespace, m.UID)
	}
	updated, err := c.Apply(ctx, netset("default", "web", "10.0.1.0/24"))
	if err != nil {
		t.Fatalf("re-apply netset: %v", err)
	}
	um := updated.GetObjectMeta()
	if um.UID != m.UID || um.ResourceVersion == m.ResourceVersion {
		t.Errorf("re-applied netset: uid %q (was %q), resourceVersion %q (was %q)", um.UID, m.UID, um.ResourceVersion, m.ResourceVersion)
	}
	got, err := c.Get(ctx, datastore.Key{Kind: v3.KindNetworkSet, Name: "web"})
	if err != nil {
		t.Fatalf("get with empty namespace: %v", err)
	}
	if nets := got.(*v3.NetworkSet).Spec.Nets; len(nets) != 1 || nets[0] != "10.0.1.0/24" {
		t.Errorf("stored nets %v, want [10.0.1.0/24]", nets)
	}
	// A stale resourceVersion is a conflict.
	stale := netset("default", "web", "10.0.2.0/24")
	stale.ResourceVersion = m.ResourceVersion
	if _, err := c.Update(ctx, stale); !errors.Is(err, datastore.ErrConflict) {
		t.Errorf("update with stale resourceVersion %s: %v, want a conflict", m.ResourceVersion, err)
	}
	if _, err := c.Delete(ctx, datastore.Key{Kind: v3.KindNetworkSet, Name: "web"}, ""); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := c.Get(ctx, datastore.Key{Kind: v3.KindNetworkSet, Name: "web"}); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("get after delete: %v, want not found", err)
	}
}

// TestWriteBatch checks that a batch is checked in order (a pool
// overlapping an earlier one of the same batch is refused), that the
// others are written, and that a large batch of one kind lands whole.
func TestWriteBatch(t *testing.T) {
	c, ctx := newClient(t)
	res := c.Write(ctx, client.OpApply, []v3.Resource{
		pool("p1", "10.0.0.0/16"), pool("p2", "10.0.128.0/17"), pool("p3", "10.2.0.0/16"),
	})
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("p1, p3: %v, %v", res[0].Err, res[2].Err)
	}
	if !errors.Is(res[1].Err, client.ErrOverlap) {
		t.Fatalf("p2: %v, want an overlap with p1", res[1].Err)
	}
	var many []v3.Resource
	for i := range 50 {
		many = append(many, netset("ns1", "set-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "10.0.0.0/24"))
	}
	for i, r := range c.Write(ctx, client.OpCreate, many) {
		if r.Err != nil {
			t.Fatalf("netset %d: %v", i, r.Err)
		}
	}
	items, _, err := c.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet, Namespace: "ns1"})
	if err != nil || len(items) != 50 {
		t.Fatalf("listed %d netsets (%v), want 50", len(items), err)
	}
	// Creating them again fails for each, found by the one read of the kind.
	for i, r := range c.Write(ctx, client.OpCreate, many) {
		if !errors.Is(r.Err, datastore.ErrAlreadyExists) {
			t.Fatalf("second create of netset %d: %v, want already exists", i, r.Err)
		}
	}
}

// TestBatchFallsBackToSingleWrites checks that when one resource of a
// batched write carries a stale resourceVersion, the datastore rejects the
// batch and every other resource is still written, one by one, while the
// stale one reports its conflict.
func TestBatchFallsBackToSingleWrites(t *testing.T) {
	c, ctx := newClient(t)
	var sets []v3.Resource
	for i := range 20 {
		sets = append(sets, netset("ns1", fmt.Sprintf("set-%02d", i), "10.0.0.0/24"))
	}
	created := c.Write(ctx, client.OpCreate, sets)
	var updates []v3.Resource
	for i, r := range created {
		if r.Err != nil {
			t.Fatalf("create %d: %v", i, r.Err)
		}
		u := r.Resource.(*v3.NetworkSet)
		u.Spec.Nets = []string{"10.9.0.0/24"}
		updates = append(updates, u)
	}
	// Move set-07 on behind the batch's back, so its version goes stale.
	moved := *updates[7].(*v3.NetworkSet)
	moved.Spec.Nets = []string{"10.7.0.0/24"}
	if _, err := c.Update(ctx, &moved); err != nil {
		t.Fatal(err)
	}
	for i, r := range c.Write(ctx, client.OpUpdate, updates) {
		if i == 7 {
			if !errors.Is(r.Err, datastore.ErrConflict) {
				t.Fatalf("stale update of set-07: %v, want a conflict", r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("update %d: %v", i, r.Err)
		}
	}
	items, _, err := c.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet, Namespace: "ns1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		want := "10.9.0.0/24"
		if it.GetObjectMeta().Name == "set-07" {
			want = "10.7.0.0/24"
		}
		if got := it.(*v3.NetworkSet).Spec.Nets[0]; got != want {
			t.Errorf("%s: nets %s, want %s", it.GetObjectMeta().Name, got, want)
		}
	}
}
