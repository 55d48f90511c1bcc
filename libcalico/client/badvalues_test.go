package client_test

import (
	"errors"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// TestWritesOverBadValues: a stored value that is not a valid resource
// takes its key (a create there fails) but an update or apply replaces it,
// alone or in a batch; ListWithBadValues names it while it is there.
func TestWritesOverBadValues(t *testing.T) {
	c, ctx := newClient(t)
	raw := c.Store().(*etcdv3.Store).Client()
	bad := func(name string) {
		t.Helper()
		if _, err := raw.Put(ctx, datastore.ResourcePrefix+"networksets/ns/"+name, "{garbage"); err != nil {
			t.Fatal(err)
		}
	}
	bad("one")
	if _, err := c.Create(ctx, netset("ns", "one", "10.0.0.0/24")); !errors.Is(err, datastore.ErrAlreadyExists) {
		t.Fatalf("create over a bad value: %v, want already exists", err)
	}
	items, bads, _, err := c.ListWithBadValues(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet})
	if err != nil || len(items) != 0 || len(bads) != 1 || bads[0].Key.Name != "one" {
		t.Fatalf("ListWithBadValues: %v, %v, %v; want the bad value named", items, bads, err)
	}
	for _, op := range []client.Op{client.OpUpdate, client.OpApply} {
		bad("one")
		res := c.Write(ctx, op, []v3.Resource{netset("ns", "one", "10.0.0.0/24")})[0]
		if res.Err != nil || res.Resource.GetObjectMeta().UID == "" {
			t.Fatalf("%s over a bad value: %v", op, res.Err)
		}
	}
	// Many of one kind are read whole and written in batches.
	var many []v3.Resource
	for i := range 10 {
		name := string(rune('a' + i))
		bad(name)
		many = append(many, netset("ns", name, "10.0.0.0/24"))
	}
	for i, res := range c.Write(ctx, client.OpApply, many) {
		if res.Err != nil {
			t.Fatalf("batched apply %d over a bad value: %v", i, res.Err)
		}
	}
	if items, bads, _, err := c.ListWithBadValues(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet}); err != nil || len(items) != 11 || len(bads) != 0 {
		t.Fatalf("after replacing them: %d items, %d bad, %v", len(items), len(bads), err)
	}
}
