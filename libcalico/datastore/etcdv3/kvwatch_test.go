package etcdv3_test

import (
	"context"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestWatchKV checks the raw-key watch felix follows IPAM blocks with:
// from a List's revision it reports creates, updates and deletes under
// the prefix in order, nothing outside it, and closes when ctx ends.
func TestWatchKV(t *testing.T) {
	s := connect(t, etcdtest.Start(t))
	kv := s.KV()
	ctx := testCtx(t)
	if _, err := kv.Create(ctx, datastore.KVPair{Key: "/t/p/before", Value: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	_, rev, err := kv.List(ctx, "/t/p/")
	if err != nil {
		t.Fatal(err)
	}
	// Written after the List: the watch must report it.
	a, err := kv.Create(ctx, datastore.KVPair{Key: "/t/p/a", Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.WatchKV(wctx, "/t/p/", rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, datastore.KVPair{Key: "/t/other", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	a.Value = []byte("2")
	if _, err := kv.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "/t/p/before", 0); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ   datastore.EventType
		key   string
		value string
	}{
		{datastore.Added, "/t/p/a", "1"},
		{datastore.Modified, "/t/p/a", "2"},
		{datastore.Deleted, "/t/p/before", ""},
	}
	for i, w := range want {
		select {
		case ev := <-ch:
			if ev.Type != w.typ || ev.Pair.Key != w.key || string(ev.Pair.Value) != w.value || ev.Pair.Revision <= rev {
				t.Fatalf("event %d: %v %s %q rev %d, want %v %s %q after %d", i, ev.Type, ev.Pair.Key, ev.Pair.Value, ev.Pair.Revision, w.typ, w.key, w.value, rev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d (%v %s) never came", i, w.typ, w.key)
		}
	}
	cancel()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			t.Fatalf("unexpected event %v %s", ev.Type, ev.Pair.Key)
		case <-deadline:
			t.Fatal("the channel was not closed after ctx ended")
		}
	}
}
