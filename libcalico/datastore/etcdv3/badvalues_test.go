package etcdv3_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// badValue is a value written straight into etcd that is not the resource
// its key names, and what the reason given for skipping it must say.
type badValue struct {
	path, value, reason string
}

const (
	poolPath = datastore.ResourcePrefix + "ippools/"
	gnpPath  = datastore.ResourcePrefix + "globalnetworkpolicies/"
	npPath   = datastore.ResourcePrefix + "networkpolicies/"
)

// badValues are one of each way a stored value can be wrong.
var badValues = []badValue{
	{poolPath + "b-not-json", `{not json`, "decoding: "},
	{poolPath + "c-null", `null`, `it says kind "", not IPPool`},
	{poolPath + "d-wrong-type", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"d-wrong-type"},"spec":{"cidr":42}}`, "decoding: "},
	{poolPath + "e-no-kind", `{"metadata":{"name":"e-no-kind"},"spec":{"cidr":"10.5.0.0/16"}}`, `it says kind "", not IPPool`},
	{poolPath + "f-old-api", `{"kind":"IPPool","apiVersion":"projectcalico.org/v2","metadata":{"name":"f-old-api"},"spec":{"cidr":"10.6.0.0/16"}}`, `it says apiVersion "projectcalico.org/v2", not projectcalico.org/v3`},
	{poolPath + "g-other-name", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"someone-else"},"spec":{"cidr":"10.7.0.0/16"}}`, `its metadata.name "someone-else" is not the key's "g-other-name"`},
	{poolPath + "h/extra-segment", `{}`, "needs 1 segment(s)"},
	// An IPPool stored under a GlobalNetworkPolicy key: read as a policy,
	// it would be an empty one selecting every endpoint.
	{gnpPath + "pool-in-disguise", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"pool-in-disguise"},"spec":{"cidr":"10.8.0.0/16"}}`, `it says kind "IPPool", not GlobalNetworkPolicy`},
	{npPath + "ns1/moved", `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"moved","namespace":"ns2"},"spec":{"selector":"all()"}}`, `its metadata.namespace "ns2" is not the key's "ns1"`},
}

// putRaw writes path=value behind the store's back.
func putRaw(t *testing.T, raw *etcdv3.Store, path, value string) int64 {
	t.Helper()
	resp, err := raw.Client().Put(testCtx(t), path, value)
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return resp.Header.Revision
}

// testBadValuesSkipped: List skips every bad value and returns the rest,
// ListWithBadValues names each with its reason, each is logged and
// counted once however often it is read, Get fails with ErrBadValue, and a
// list of every kind skips them too.
func testBadValuesSkipped(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	mustCreate(t, s, pool("a-good", "10.1.0.0/16"))
	mustCreate(t, s, pool("z-good", "10.2.0.0/16"))
	mustCreate(t, s, gnp("allow-dns"))
	for _, b := range badValues {
		putRaw(t, raw, b.path, b.value)
	}
	counter := s.(datastore.BadValuesReporter).BadValues()
	before := counter.Total()

	items, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		t.Fatalf("List of IP pools with bad values among them: %v", err)
	}
	if got := names(items); !slices.Equal(got, []string{"a-good", "z-good"}) {
		t.Fatalf("List returned %v, want the two good pools", got)
	}
	items, bad, _, err := s.(datastore.BadValueLister).ListWithBadValues(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil || len(items) != 2 {
		t.Fatalf("ListWithBadValues: %d items, %v", len(items), err)
	}
	var wantPaths []string
	for _, b := range badValues {
		if strings.HasPrefix(b.path, poolPath) {
			wantPaths = append(wantPaths, b.path)
		}
	}
	if len(bad) != len(wantPaths) {
		t.Fatalf("ListWithBadValues reported %d bad values, want %d: %v", len(bad), len(wantPaths), bad)
	}
	for i, bv := range bad {
		want := badValues[i]
		if bv.Path != want.path || !strings.Contains(bv.Error(), want.reason) || !errors.Is(bv, datastore.ErrBadValue) {
			t.Errorf("bad value %d: %v (path %s), want %s with reason %q", i, bv, bv.Path, want.path, want.reason)
		}
	}
	if got := counter.Total() - before; got != uint64(len(wantPaths)) {
		t.Errorf("listing twice counted %d bad values, want each of the %d once", got, len(wantPaths))
	}

	gnps, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindGlobalNetworkPolicy})
	if err != nil || !slices.Equal(names(gnps), []string{"allow-dns"}) {
		t.Fatalf("List of policies: %v (%v), want only allow-dns: an IPPool under a policy key is no policy", names(gnps), err)
	}
	nps, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkPolicy, Namespace: "ns1"})
	if err != nil || len(nps) != 0 {
		t.Fatalf("List of ns1's policies: %v (%v), want none", names(nps), err)
	}
	all, _, err := s.List(ctx, datastore.ListOptions{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List of everything: %v (%v), want the three good resources", names(all), err)
	}

	_, err = s.Get(ctx, datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: "pool-in-disguise"})
	var bv *datastore.BadValueError
	if !errors.As(err, &bv) || bv.Key.Name != "pool-in-disguise" || bv.Deleted ||
		!strings.Contains(err.Error(), `globalnetworkpolicy "pool-in-disguise": stored value (revision `) {
		t.Fatalf("Get of an IPPool stored as a policy: %v, want a BadValueError naming the key", err)
	}
	if _, err := s.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "a-good"}); err != nil {
		t.Fatalf("Get of a good pool beside bad ones: %v", err)
	}
}

// testBadValuesReplacedAndDeleted: a write replaces a bad value like any
// other, and Delete removes one and says it was not a valid resource.
func testBadValuesReplacedAndDeleted(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	putRaw(t, raw, poolPath+"fixme", `{not json`)
	rev := putRaw(t, raw, poolPath+"dropme", `{"kind":"GlobalNetworkPolicy"}`)

	fixed, err := s.Apply(ctx, pool("fixme", "10.9.0.0/16"))
	if err != nil {
		t.Fatalf("Apply over a bad value: %v", err)
	}
	if fixed.GetObjectMeta().UID == "" || fixed.GetObjectMeta().CreationTimestamp.IsZero() {
		t.Errorf("a resource written over a bad value has no fresh uid or creation time: %+v", fixed.GetObjectMeta())
	}
	got, err := s.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "fixme"})
	if err != nil || got.(*v3.IPPool).Spec.CIDR != "10.9.0.0/16" {
		t.Fatalf("Get after Apply: %v, %v", got, err)
	}

	_, err = s.Delete(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "dropme"}, "")
	var bv *datastore.BadValueError
	if !errors.As(err, &bv) || !bv.Deleted || bv.Revision != rev ||
		!strings.Contains(err.Error(), fmt.Sprintf(`ippool "dropme": deleted value (revision %d) is not a valid resource: it says kind "GlobalNetworkPolicy", not IPPool`, rev)) {
		t.Fatalf("Delete of a bad value: %v, want a BadValueError with Deleted set", err)
	}
	if _, err := s.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: "dropme"}); !errors.Is(err, datastore.ErrNotFound) {
		t.Fatalf("Get after deleting a bad value: %v, want not found", err)
	}
}

// testBadValuesInLargeList: bad values among many pages, decoded in
// parallel, are skipped and the rest all listed.
func testBadValuesInLargeList(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	const count, every = 3000, 97
	codec := datastore.NewCodec()
	var ops []clientv3.Op
	good := 0
	for i := range count {
		set := netset("ns", fmt.Sprintf("set-%05d", i), "10.0.0.0/24")
		path, err := datastore.KeyPath(datastore.KeyOf(set))
		if err != nil {
			t.Fatal(err)
		}
		val := "{broken"
		if i%every != 0 {
			b, _, err := codec.Encode(set, fmt.Sprintf("uid-%d", i), v3.Time{})
			if err != nil {
				t.Fatal(err)
			}
			val = string(b)
			good++
		}
		ops = append(ops, clientv3.OpPut(path, val))
		if len(ops) == 100 || i == count-1 {
			if _, err := raw.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	items, bad, _, err := s.(datastore.BadValueLister).ListWithBadValues(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != good || len(bad) != count-good {
		t.Fatalf("listed %d good and %d bad network sets, want %d and %d", len(items), len(bad), good, count-good)
	}
	for i := 1; i < len(bad); i++ {
		if bad[i-1].Path >= bad[i].Path {
			t.Fatalf("bad values out of key order: %s before %s", bad[i-1].Path, bad[i].Path)
		}
	}
}

// testWatchBadValues: the watcher agrees with List. A bad value is not
// reported; one that replaces a good value the consumer has is its
// deletion; a good value after a bad one is an addition; deleting a bad
// value is nothing.
func testWatchBadValues(t *testing.T, s *etcdv3.Store, _ []string) {
	t.Run("Watch", func(t *testing.T) { watchBadValues(t, s, watchPlain) })
	wipe(t, s)
	t.Run("WatchListed", func(t *testing.T) { watchBadValues(t, s, watchListed) })
}

func watchBadValues(t *testing.T, s *etcdv3.Store, start watchStart) {
	ctx := testCtx(t)
	putRaw(t, s, poolPath+"seeded-bad", `{not json`)
	mustCreate(t, s, pool("seeded-good", "10.3.0.0/16"))
	items, rev, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		t.Fatal(err)
	}
	w, err := start(s, rev, items)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := func(what string, typ datastore.EventType, name, cidr string) {
		t.Helper()
		if e := summarize(next(t, w)); e.Type != typ || e.Name != name || e.Spec != cidr {
			t.Fatalf("%s: got %s, want %s %s %s", what, e, typ, name, cidr)
		}
	}
	mustCreate(t, s, pool("p1", "10.1.0.0/16"))
	want("create", datastore.Added, "p1", "10.1.0.0/16")
	putRaw(t, s, poolPath+"p1", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"not-p1"}}`)
	want("a bad value over p1", datastore.Deleted, "p1", "10.1.0.0/16")
	putRaw(t, s, poolPath+"p1", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p1"},"spec":{"cidr":"10.11.0.0/16"}}`)
	want("a good value over a bad one", datastore.Added, "p1", "10.11.0.0/16")
	putRaw(t, s, poolPath+"seeded-bad", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"seeded-bad"},"spec":{"cidr":"10.4.0.0/16"}}`)
	want("a good value over one that was bad at the start", datastore.Added, "seeded-bad", "10.4.0.0/16")
	putRaw(t, s, poolPath+"seeded-good", `[]`)
	want("a bad value over one that was good at the start", datastore.Deleted, "seeded-good", "10.3.0.0/16")
	putRaw(t, s, poolPath+"p2", `{}`)
	if _, err := s.Client().Delete(ctx, poolPath+"p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(ctx, poolPath+"seeded-good"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, pool("p3", "10.12.0.0/16"))
	want("after a bad value came and went unseen", datastore.Added, "p3", "10.12.0.0/16")
	quiet(t, w)
}

// names are the keys of rs.
func names(rs []v3.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = keyName(r)
	}
	return out
}

func gnp(name string) *v3.GlobalNetworkPolicy {
	return &v3.GlobalNetworkPolicy{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.GlobalNetworkPolicySpec{Selector: "all()"}}
}
