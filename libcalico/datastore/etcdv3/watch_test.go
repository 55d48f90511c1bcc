package etcdv3_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// seen is an event reduced to what tests compare.
type seen struct {
	Type     datastore.EventType
	Name     string
	Revision string
	Spec     string
}

func (e seen) String() string { return fmt.Sprintf("%s %s@%s %s", e.Type, e.Name, e.Revision, e.Spec) }

// summarize reduces an event; Spec is the pool's CIDR or the policy's
// selector.
func summarize(e datastore.Event) seen {
	out := seen{Type: e.Type, Revision: e.Revision}
	switch o := e.Object.(type) {
	case *v3.IPPool:
		out.Name, out.Spec = keyName(o), o.Spec.CIDR
	case *v3.NetworkPolicy:
		out.Name, out.Spec = keyName(o), o.Spec.Selector
	case nil:
		out.Spec = fmt.Sprint(e.Err)
	}
	return out
}

// next waits for one event.
func next(t *testing.T, w datastore.Watcher) datastore.Event {
	t.Helper()
	select {
	case e, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch channel closed early")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch event within 10s")
	}
	return datastore.Event{}
}

// quiet checks that no event arrives for a short while.
func quiet(t *testing.T, w datastore.Watcher) {
	t.Helper()
	select {
	case e := <-w.Events():
		t.Fatalf("unexpected extra event %s", summarize(e))
	case <-time.After(300 * time.Millisecond):
	}
}

func testWatchOrder(t *testing.T, s *etcdv3.Store, _ []string) {
	ctx := testCtx(t)
	mustCreate(t, s, policy("other", "ignored-before", "all()"))
	_, startRev, err := s.List(ctx, datastore.ListOptions{Kind: "IPPool"})
	if err != nil {
		t.Fatal(err)
	}
	fromStart, err := s.Watch(ctx, datastore.ListOptions{Kind: "IPPool"}, startRev)
	if err != nil {
		t.Fatalf("watch from %s: %v", startRev, err)
	}
	defer fromStart.Stop()

	// The sequence of writes, and the events they must produce.
	var want []seen
	a := mustCreate(t, s, pool("a", "10.1.0.0/16"))
	want = append(want, seen{datastore.Added, "a", a.GetObjectMeta().ResourceVersion, "10.1.0.0/16"})
	b := mustCreate(t, s, pool("b", "10.2.0.0/16"))
	want = append(want, seen{datastore.Added, "b", b.GetObjectMeta().ResourceVersion, "10.2.0.0/16"})
	mustCreate(t, s, policy("default", "not-a-pool", "all()"))
	a.(*v3.IPPool).Spec.CIDR = "10.11.0.0/16"
	a2, err := s.Update(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, seen{datastore.Modified, "a", a2.GetObjectMeta().ResourceVersion, "10.11.0.0/16"})
	if _, err := s.Delete(ctx, datastore.KeyOf(b), ""); err != nil {
		t.Fatal(err)
	}
	_, afterDelete, _ := s.List(ctx, datastore.ListOptions{Kind: "IPPool"})
	// The deletion is reported at its own revision, with b's last state.
	want = append(want, seen{datastore.Deleted, "b", afterDelete, "10.2.0.0/16"})
	c := mustCreate(t, s, pool("c", "10.3.0.0/16"))
	want = append(want, seen{datastore.Added, "c", c.GetObjectMeta().ResourceVersion, "10.3.0.0/16"})

	check := func(name string, w datastore.Watcher, want []seen) {
		t.Helper()
		var got []seen
		for range want {
			got = append(got, summarize(next(t, w)))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: events\n got %v\nwant %v", name, got, want)
		}
		quiet(t, w)
	}
	check("watch started before the writes", fromStart, want)

	// A watch started afterwards from the same revision replays the same
	// history; one from "now" sees only what follows.
	replay, err := s.Watch(ctx, datastore.ListOptions{Kind: "IPPool"}, startRev)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Stop()
	check("replay from the list revision", replay, want)

	fromNow, err := s.Watch(ctx, datastore.ListOptions{Kind: "IPPool"}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fromNow.Stop()
	nsWatch, err := s.Watch(ctx, datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "default"}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer nsWatch.Stop()
	if _, err := s.Delete(ctx, datastore.KeyOf(c), ""); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, policy("other", "elsewhere", "all()"))
	d := mustCreate(t, s, policy("default", "here", "x == 'y'"))
	_, lastRev, _ := s.List(ctx, datastore.ListOptions{})
	check("watch from now", fromNow, []seen{{datastore.Deleted, "c", fmt.Sprint(rev(t, c.GetObjectMeta().ResourceVersion) + 1), "10.3.0.0/16"}})
	check("watch of one namespace", nsWatch, []seen{{datastore.Added, "default/here", d.GetObjectMeta().ResourceVersion, "x == 'y'"}})
	if d.GetObjectMeta().ResourceVersion != lastRev {
		t.Fatalf("last write at %s, store at %s", d.GetObjectMeta().ResourceVersion, lastRev)
	}

	// Stop closes the channel.
	fromNow.Stop()
	if _, ok := <-fromNow.Events(); ok {
		t.Fatalf("channel still open after Stop")
	}
}

func testWatchFromCompactedRevision(t *testing.T, s *etcdv3.Store, _ []string) {
	ctx := testCtx(t)
	first := mustCreate(t, s, pool("a", "10.1.0.0/16"))
	mustCreate(t, s, pool("b", "10.2.0.0/16"))
	_, now, _ := s.List(ctx, datastore.ListOptions{})
	if _, err := s.Client().Compact(ctx, rev(t, now), clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	_, err := s.Watch(ctx, datastore.ListOptions{Kind: "IPPool"}, first.GetObjectMeta().ResourceVersion)
	var ce *datastore.CompactedError
	if !errors.Is(err, datastore.ErrCompacted) || !errors.As(err, &ce) || ce.Revision != first.GetObjectMeta().ResourceVersion {
		t.Fatalf("watch from compacted revision %s: %v, want a CompactedError", first.GetObjectMeta().ResourceVersion, err)
	}
}

// consumer applies events to a map of name → resourceVersion, failing on
// any event that does not follow from what it already holds.
type consumer struct {
	t      *testing.T
	state  map[string]string
	events []seen
}

func (c *consumer) apply(e datastore.Event) {
	c.t.Helper()
	s := summarize(e)
	c.events = append(c.events, s)
	held, has := c.state[s.Name]
	switch e.Type {
	case datastore.Added:
		if has {
			c.t.Fatalf("duplicate Added for %s (held at %s): %v", s.Name, held, c.events)
		}
		c.state[s.Name] = e.Object.GetObjectMeta().ResourceVersion
	case datastore.Modified:
		if !has || rev(c.t, e.Object.GetObjectMeta().ResourceVersion) <= rev(c.t, held) {
			c.t.Fatalf("Modified for %s not newer than held %q: %v", s.Name, held, c.events)
		}
		c.state[s.Name] = e.Object.GetObjectMeta().ResourceVersion
	case datastore.Deleted:
		if !has || e.Object.GetObjectMeta().ResourceVersion != held {
			c.t.Fatalf("Deleted for %s whose last state %s is not the held %q: %v",
				s.Name, e.Object.GetObjectMeta().ResourceVersion, held, c.events)
		}
		delete(c.state, s.Name)
	default:
		c.t.Fatalf("unexpected event %s", s)
	}
}

// watchStart starts a watcher from a List's revision, given its items.
type watchStart func(s *etcdv3.Store, rev string, items []v3.Resource) (datastore.Watcher, error)

func watchPlain(s *etcdv3.Store, rev string, _ []v3.Resource) (datastore.Watcher, error) {
	return s.Watch(context.Background(), datastore.ListOptions{Kind: "IPPool"}, rev)
}

func watchListed(s *etcdv3.Store, rev string, items []v3.Resource) (datastore.Watcher, error) {
	return s.WatchListed(context.Background(), datastore.ListOptions{Kind: "IPPool"}, rev, items)
}

func testWatchResumesAfterCompaction(t *testing.T, direct *etcdv3.Store, endpoints []string) {
	t.Run("Watch", func(t *testing.T) { resumesAfterCompaction(t, direct, endpoints, watchPlain) })
	wipe(t, direct)
	t.Run("WatchListed", func(t *testing.T) { resumesAfterCompaction(t, direct, endpoints, watchListed) })
}

// resumesAfterCompaction: a watcher cut off while the history it needs
// is changed and compacted brings its consumer to the present with the
// net changes; deletions carry the resource's key and last revision (and
// the whole last value when the deletion's own event is seen).
func resumesAfterCompaction(t *testing.T, direct *etcdv3.Store, endpoints []string, start watchStart) {
	ctx := testCtx(t)
	px := etcdtest.StartRelay(t, endpoints[0])
	proxied := connect(t, []string{px.Endpoint()})

	for _, p := range []v3.Resource{pool("keep", "10.1.0.0/16"), pool("change", "10.2.0.0/16"), pool("remove", "10.3.0.0/16")} {
		mustCreate(t, direct, p)
	}
	items, listRev, err := proxied.List(ctx, datastore.ListOptions{Kind: "IPPool"})
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{t: t, state: map[string]string{}}
	for _, it := range items {
		c.state[keyName(it)] = it.GetObjectMeta().ResourceVersion
	}
	w, err := start(proxied, listRev, items)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustCreate(t, direct, pool("before-cut", "10.4.0.0/16"))
	c.apply(next(t, w))
	// A deletion seen as it happens carries the whole last value.
	mustCreate(t, direct, pool("deleted-live", "10.8.0.0/16"))
	c.apply(next(t, w))
	if _, err := direct.Delete(ctx, datastore.Key{Kind: "IPPool", Name: "deleted-live"}, ""); err != nil {
		t.Fatal(err)
	}
	e := next(t, w)
	c.apply(e)
	if got := summarize(e); got.Type != datastore.Deleted || got.Spec != "10.8.0.0/16" {
		t.Fatalf("live deletion reported as %s, want Deleted with its last value", got)
	}

	// Disconnect the watcher, change everything while it is away, and
	// compact the history it would need to catch up.
	px.Refuse()
	change := func(name, cidr string) {
		t.Helper()
		cur, err := direct.Get(ctx, datastore.Key{Kind: "IPPool", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		cur.(*v3.IPPool).Spec.CIDR = cidr
		if _, err := direct.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	change("change", "10.20.0.0/16")
	change("change", "10.21.0.0/16")
	if _, err := direct.Delete(ctx, datastore.Key{Kind: "IPPool", Name: "remove"}, ""); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, direct, pool("added", "10.5.0.0/16"))
	mustCreate(t, direct, pool("transient", "10.6.0.0/16"))
	if _, err := direct.Delete(ctx, datastore.Key{Kind: "IPPool", Name: "transient"}, ""); err != nil {
		t.Fatal(err)
	}
	_, now, _ := direct.List(ctx, datastore.ListOptions{})
	if _, err := direct.Client().Compact(ctx, rev(t, now), clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact at %s: %v", now, err)
	}
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}

	// The watcher must bring the consumer to the current state, with
	// only the net changes (the history is gone).
	final, _, err := direct.List(ctx, datastore.ListOptions{Kind: "IPPool"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, it := range final {
		want[keyName(it)] = it.GetObjectMeta().ResourceVersion
	}
	deadline := time.After(20 * time.Second)
	for !mapsEqual(c.state, want) {
		select {
		case e := <-w.Events():
			c.apply(e)
		case <-deadline:
			t.Fatalf("after 20s the consumer holds %v, want %v; events %v", c.state, want, c.events)
		}
	}
	quiet(t, w)
	var names []string
	for _, e := range c.events[3:] {
		names = append(names, e.Type.String()+" "+e.Name)
	}
	slices.Sort(names)
	wantNames := []string{"Added added", "Deleted remove", "Modified change"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("events after the cut %v, want exactly %v (net changes, once each)", names, wantNames)
	}

	// And it goes on watching normally.
	mustCreate(t, direct, pool("after", "10.7.0.0/16"))
	c.apply(next(t, w))
	if got := c.events[len(c.events)-1]; got.Name != "after" || !strings.HasPrefix(got.String(), "Added") {
		t.Fatalf("after resuming got %s", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
