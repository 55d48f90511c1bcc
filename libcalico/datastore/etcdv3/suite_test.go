package etcdv3_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// TestEmbeddedEtcd runs the behavioural suite against an embedded etcd,
// with the gRPC client and the lean HTTP one.
func TestEmbeddedEtcd(t *testing.T) {
	runSuite(t, etcdtest.Start(t))
}

// TestExternalEtcd runs the same suite against the system etcd binary
// running as its own process.
func TestExternalEtcd(t *testing.T) {
	runSuite(t, etcdtest.StartExternal(t))
}

// runSuite is the behaviour every etcd the store talks to must show, with
// both clients. Each case starts from an empty store; raw is a gRPC store
// on the same etcd for what the case checks behind the client's back.
func runSuite(t *testing.T, endpoints []string) {
	cases := []struct {
		name string
		run  func(t *testing.T, s store, raw *etcdv3.Store)
	}{
		{"CRUDClusterScoped", testCRUDClusterScoped},
		{"CRUDNamespaced", testCRUDNamespaced},
		{"Conflicts", testConflicts},
		{"AlreadyExists", testAlreadyExists},
		{"NotFound", testNotFound},
		{"List", testList},
		{"ListManyPages", testListManyPages},
		{"ConcurrentCompareAndSwap", testConcurrentCAS},
		{"BadValuesSkipped", testBadValuesSkipped},
		{"BadValuesReplacedAndDeleted", testBadValuesReplacedAndDeleted},
		{"BadValuesInLargeList", testBadValuesInLargeList},
		{"KV", testKV},
		{"WriteBatch", testWriteBatch},
	}
	// Watching needs the gRPC client.
	watchCases := []struct {
		name string
		run  func(t *testing.T, s *etcdv3.Store, endpoints []string)
	}{
		{"WatchOrder", testWatchOrder},
		{"WatchFromCompactedRevision", testWatchFromCompactedRevision},
		{"WatchResumesAfterCompaction", testWatchResumesAfterCompaction},
		{"WatchSkipsBadValues", testWatchBadValues},
	}
	for _, c := range clients() {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					raw := connect(t, endpoints)
					wipe(t, raw)
					tc.run(t, connectWith(t, c, endpoints), raw)
				})
			}
			if !c.watches {
				t.Run("WatchUnsupported", func(t *testing.T) {
					testWatchUnsupported(t, connectWith(t, c, endpoints))
				})
				return
			}
			for _, tc := range watchCases {
				t.Run(tc.name, func(t *testing.T) {
					s := connect(t, endpoints)
					wipe(t, s)
					tc.run(t, s, endpoints)
				})
			}
		})
	}
}

// testWatchUnsupported: a client that cannot watch says so at once.
func testWatchUnsupported(t *testing.T, s store) {
	w, err := s.Watch(testCtx(t), datastore.ListOptions{Kind: "IPPool"}, "")
	if w != nil || !errors.Is(err, etcdhttp.ErrWatchUnsupported) {
		t.Fatalf("Watch = %v, %v; want ErrWatchUnsupported", w, err)
	}
	if !strings.Contains(err.Error(), "watch is not supported by the lean client") {
		t.Errorf("Watch error %q does not explain itself", err)
	}
}

// checkStored reads the raw value of r and checks it carries kind and
// apiVersion but no resourceVersion.
func checkStored(t *testing.T, s *etcdv3.Store, r v3.Resource) {
	t.Helper()
	path, err := datastore.KeyPath(datastore.KeyOf(r))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Get(testCtx(t), path)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get %s: %v (%d keys)", path, err, len(resp.Kvs))
	}
	var doc struct {
		Kind       string         `json:"kind"`
		APIVersion string         `json:"apiVersion"`
		Metadata   map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &doc); err != nil {
		t.Fatalf("stored value of %s is not JSON: %v", path, err)
	}
	if doc.Kind != r.GetTypeMeta().Kind || doc.APIVersion != "projectcalico.org/v3" {
		t.Errorf("stored %s has kind %q apiVersion %q", path, doc.Kind, doc.APIVersion)
	}
	if _, has := doc.Metadata["resourceVersion"]; has {
		t.Errorf("stored %s carries a resourceVersion: %s", path, resp.Kvs[0].Value)
	}
	if got, want := strconv.FormatInt(resp.Kvs[0].ModRevision, 10), r.GetObjectMeta().ResourceVersion; got != want {
		t.Errorf("%s: resourceVersion %s, etcd mod revision %s", path, want, got)
	}
}

// crudCase drives one kind through create, get, update, apply and delete.
type crudCase struct {
	create  v3.Resource
	change  func(v3.Resource) // mutates a fetched copy
	applied v3.Resource       // a second resource created by Apply
}

func runCRUD(t *testing.T, s store, raw *etcdv3.Store, c crudCase) {
	ctx := testCtx(t)
	inputCopy := reflect.ValueOf(c.create).Elem().Interface()
	created := mustCreate(t, s, c.create)
	if !reflect.DeepEqual(reflect.ValueOf(c.create).Elem().Interface(), inputCopy) {
		t.Errorf("Create modified its input")
	}
	m := created.GetObjectMeta()
	if m.ResourceVersion == "" || m.UID == "" || m.CreationTimestamp.IsZero() {
		t.Fatalf("created %s lacks resourceVersion, uid or creationTimestamp: %+v", keyName(created), m)
	}
	if created.GetTypeMeta().APIVersion != v3.APIVersion || created.GetTypeMeta().Kind == "" {
		t.Errorf("created %s has TypeMeta %+v", keyName(created), created.GetTypeMeta())
	}
	checkStored(t, raw, created)

	got, err := s.Get(ctx, datastore.KeyOf(created))
	if err != nil {
		t.Fatalf("get %s: %v", keyName(created), err)
	}
	if !reflect.DeepEqual(got, created) {
		t.Fatalf("get %s\n got %+v\nwant %+v", keyName(created), got, created)
	}

	c.change(got)
	updated, err := s.Update(ctx, got)
	if err != nil {
		t.Fatalf("update %s: %v", keyName(got), err)
	}
	um := updated.GetObjectMeta()
	if um.UID != m.UID || !um.CreationTimestamp.Equal(m.CreationTimestamp.Time) {
		t.Errorf("update changed uid/creationTimestamp: %s/%v -> %s/%v", m.UID, m.CreationTimestamp, um.UID, um.CreationTimestamp)
	}
	if rev(t, um.ResourceVersion) <= rev(t, m.ResourceVersion) {
		t.Errorf("update did not advance resourceVersion: %s -> %s", m.ResourceVersion, um.ResourceVersion)
	}
	if reflect.DeepEqual(specOf(updated), specOf(created)) {
		t.Errorf("update did not change the spec")
	}
	checkStored(t, raw, updated)

	// Apply without a resourceVersion over the existing one keeps its
	// identity; Apply of a new one creates it.
	again := reflect.ValueOf(c.create).Interface().(v3.Resource)
	applied, err := s.Apply(ctx, again)
	if err != nil {
		t.Fatalf("apply %s: %v", keyName(again), err)
	}
	if applied.GetObjectMeta().UID != m.UID || !reflect.DeepEqual(specOf(applied), specOf(created)) {
		t.Errorf("apply over existing: uid %s (want %s), spec %+v (want %+v)", applied.GetObjectMeta().UID, m.UID, specOf(applied), specOf(created))
	}
	fresh, err := s.Apply(ctx, c.applied)
	if err != nil {
		t.Fatalf("apply new %s: %v", keyName(c.applied), err)
	}
	if fresh.GetObjectMeta().UID == "" || fresh.GetObjectMeta().UID == m.UID {
		t.Errorf("apply of a new resource gave uid %q", fresh.GetObjectMeta().UID)
	}

	deleted, err := s.Delete(ctx, datastore.KeyOf(applied), applied.GetObjectMeta().ResourceVersion)
	if err != nil {
		t.Fatalf("delete %s: %v", keyName(applied), err)
	}
	if !reflect.DeepEqual(deleted, applied) {
		t.Errorf("delete returned\n %+v\nwant the last state\n %+v", deleted, applied)
	}
	if _, err := s.Get(ctx, datastore.KeyOf(applied)); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("get after delete: %v, want not found", err)
	}
	if _, err := s.Delete(ctx, datastore.KeyOf(fresh), ""); err != nil {
		t.Errorf("unconditional delete of %s: %v", keyName(fresh), err)
	}
}

func rev(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

// specOf returns the Spec field of a resource.
func specOf(r v3.Resource) any {
	return reflect.ValueOf(r).Elem().FieldByName("Spec").Interface()
}

func testCRUDClusterScoped(t *testing.T, s store, raw *etcdv3.Store) {
	runCRUD(t, s, raw, crudCase{
		create:  pool("pool-a", "10.1.0.0/16"),
		change:  func(r v3.Resource) { r.(*v3.IPPool).Spec.NATOutgoing = true },
		applied: pool("pool-b", "10.2.0.0/16"),
	})
}

func testCRUDNamespaced(t *testing.T, s store, raw *etcdv3.Store) {
	runCRUD(t, s, raw, crudCase{
		create:  policy("default", "allow-web", "app == 'web'"),
		change:  func(r v3.Resource) { r.(*v3.NetworkPolicy).Spec.Selector = "app == 'db'" },
		applied: policy("other", "allow-web", "all()"),
	})
}

func testConflicts(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	first := mustCreate(t, s, pool("pool-a", "10.1.0.0/16")).(*v3.IPPool)
	second := clonePool(t, first)
	second.Spec.Disabled = true
	latest, err := s.Update(ctx, second)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	stale, cur := first.ResourceVersion, latest.GetObjectMeta().ResourceVersion

	cases := []struct {
		name string
		op   func() error
		msg  string
	}{
		{"update with stale resourceVersion", func() error {
			p := clonePool(t, first)
			p.Spec.NATOutgoing = true
			_, err := s.Update(ctx, p)
			return err
		}, fmt.Sprintf(`ippool "pool-a": update conflict: resourceVersion %s is stale (current %s)`, stale, cur)},
		{"apply with stale resourceVersion", func() error {
			_, err := s.Apply(ctx, clonePool(t, first))
			return err
		}, fmt.Sprintf(`ippool "pool-a": update conflict: resourceVersion %s is stale (current %s)`, stale, cur)},
		{"delete with stale resourceVersion", func() error {
			_, err := s.Delete(ctx, datastore.KeyOf(first), stale)
			return err
		}, fmt.Sprintf(`ippool "pool-a": delete conflict: resourceVersion %s is stale (current %s)`, stale, cur)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			wantErr(t, tc.name, err, datastore.ErrConflict, tc.msg)
			var ce *datastore.ConflictError
			if !errors.As(err, &ce) || ce.Current != cur || ce.Revision != stale {
				t.Errorf("errors.As ConflictError = %+v", ce)
			}
		})
	}
	got, err := s.Get(ctx, datastore.KeyOf(first))
	if err != nil || !reflect.DeepEqual(got, latest) {
		t.Fatalf("after rejected writes the store holds %+v (%v), want %+v", got, err, latest)
	}
	// An empty resourceVersion writes unconditionally.
	p := clonePool(t, first)
	p.ResourceVersion = ""
	p.Spec.CIDR = "10.9.0.0/16"
	if _, err := s.Update(ctx, p); err != nil {
		t.Fatalf("unconditional update: %v", err)
	}
}

func testAlreadyExists(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	cases := []struct {
		r   v3.Resource
		msg string
	}{
		{pool("pool-a", "10.1.0.0/16"), `ippool "pool-a": resource already exists`},
		{policy("default", "allow-web", "all()"), `networkpolicy "allow-web" in namespace "default": resource already exists`},
	}
	for _, tc := range cases {
		first := mustCreate(t, s, tc.r)
		_, err := s.Create(ctx, tc.r)
		wantErr(t, "second create of "+keyName(tc.r), err, datastore.ErrAlreadyExists, tc.msg)
		got, err := s.Get(ctx, datastore.KeyOf(tc.r))
		if err != nil || got.GetObjectMeta().UID != first.GetObjectMeta().UID {
			t.Errorf("second create changed %s: %+v, %v", keyName(tc.r), got, err)
		}
	}
	// The same name in another namespace is another resource.
	mustCreate(t, s, policy("other", "allow-web", "all()"))
}

func testNotFound(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	poolKey := datastore.Key{Kind: "IPPool", Name: "pool-a"}
	polKey := datastore.Key{Kind: "NetworkPolicy", Namespace: "default", Name: "allow-web"}
	mustCreate(t, s, policy("other", "allow-web", "all()")) // same name, other namespace
	cases := []struct {
		name string
		op   func() error
		msg  string
	}{
		{"get cluster-scoped", func() error { _, err := s.Get(ctx, poolKey); return err },
			`ippool "pool-a": resource does not exist`},
		{"get namespaced", func() error { _, err := s.Get(ctx, polKey); return err },
			`networkpolicy "allow-web" in namespace "default": resource does not exist`},
		{"update", func() error { _, err := s.Update(ctx, pool("pool-a", "10.0.0.0/8")); return err },
			`ippool "pool-a": resource does not exist`},
		{"update with resourceVersion", func() error {
			p := pool("pool-a", "10.0.0.0/8")
			p.ResourceVersion = "3"
			_, err := s.Update(ctx, p)
			return err
		}, `ippool "pool-a": resource does not exist`},
		{"delete", func() error { _, err := s.Delete(ctx, polKey, ""); return err },
			`networkpolicy "allow-web" in namespace "default": resource does not exist`},
		{"delete with resourceVersion", func() error { _, err := s.Delete(ctx, poolKey, "3"); return err },
			`ippool "pool-a": resource does not exist`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			wantErr(t, tc.name, err, datastore.ErrNotFound, tc.msg)
			var nf *datastore.NotFoundError
			if !errors.As(err, &nf) || nf.Key.Name != "pool-a" && nf.Key.Name != "allow-web" {
				t.Errorf("errors.As NotFoundError = %+v", nf)
			}
		})
	}
}

func testList(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	var last string
	for _, r := range []v3.Resource{
		pool("p2", "10.2.0.0/16"), pool("p1", "10.1.0.0/16"), pool("p3", "10.3.0.0/16"),
		policy("a", "y", "all()"), policy("a", "x", "all()"), policy("b", "x", "all()"), policy("ab", "z", "all()"),
		netset("a", "x", "10.0.0.0/8"),
	} {
		last = mustCreate(t, s, r).GetObjectMeta().ResourceVersion
	}
	cases := []struct {
		name string
		opts datastore.ListOptions
		want []string
	}{
		{"cluster kind", datastore.ListOptions{Kind: "IPPool"}, []string{"p1", "p2", "p3"}},
		{"cluster kind by name", datastore.ListOptions{Kind: "IPPool", Name: "p2"}, []string{"p2"}},
		{"missing name", datastore.ListOptions{Kind: "IPPool", Name: "p9"}, []string{}},
		{"all namespaces", datastore.ListOptions{Kind: "NetworkPolicy"}, []string{"a/x", "a/y", "ab/z", "b/x"}},
		{"one namespace (not its prefix-mates)", datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "a"}, []string{"a/x", "a/y"}},
		{"namespace and name", datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "b", Name: "x"}, []string{"b/x"}},
		{"empty namespace", datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "c"}, []string{}},
		{"other kind same names", datastore.ListOptions{Kind: "NetworkSet"}, []string{"a/x"}},
		{"everything", datastore.ListOptions{}, []string{"p1", "p2", "p3", "a/x", "a/y", "ab/z", "b/x", "a/x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			items, revision, err := s.List(ctx, tc.opts)
			if err != nil {
				t.Fatalf("List(%+v): %v", tc.opts, err)
			}
			got := []string{}
			for _, it := range items {
				got = append(got, keyName(it))
				if it.GetObjectMeta().ResourceVersion == "" || it.GetTypeMeta().Kind == "" {
					t.Errorf("listed %s lacks resourceVersion or kind", keyName(it))
				}
			}
			if tc.opts.Kind == "" {
				// Sorted by key: plurals in byte order.
				slices.Sort(got)
				slices.Sort(tc.want)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%+v) = %v, want %v", tc.opts, got, tc.want)
			}
			if rev(t, revision) < rev(t, last) {
				t.Errorf("List revision %s is before the last write %s", revision, last)
			}
		})
	}
}

func testKV(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	kv := s.KV()
	const key = "/calico/ipam/v2/handle/k8s-pod-network.abc"
	p, err := kv.Create(ctx, datastore.KVPair{Key: key, Value: []byte("one")})
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	if _, err := kv.Create(ctx, datastore.KVPair{Key: key, Value: []byte("two")}); !errors.Is(err, datastore.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want already exists", err)
	}
	p2, err := kv.Update(ctx, datastore.KVPair{Key: key, Value: []byte("two"), Revision: p.Revision})
	if err != nil || p2.Revision <= p.Revision {
		t.Fatalf("CAS update: %+v, %v", p2, err)
	}
	_, err = kv.Update(ctx, datastore.KVPair{Key: key, Value: []byte("three"), Revision: p.Revision})
	wantErr(t, "stale CAS update", err, datastore.ErrConflict,
		fmt.Sprintf(`key %q: update conflict: revision %d is stale (current %d)`, key, p.Revision, p2.Revision))
	got, err := kv.Get(ctx, key)
	if err != nil || string(got.Value) != "two" || got.Revision != p2.Revision {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if _, err := kv.Create(ctx, datastore.KVPair{Key: "/calico/ipam/v2/handle/other", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	list, revision, err := kv.List(ctx, "/calico/ipam/v2/handle/")
	if err != nil || len(list) != 2 || list[0].Key != key || revision < p2.Revision {
		t.Fatalf("list: %+v, %d, %v", list, revision, err)
	}
	wantErr(t, "stale delete", kv.Delete(ctx, key, p.Revision), datastore.ErrConflict, "")
	if err := kv.Delete(ctx, key, p2.Revision); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantErr(t, "get deleted", func() error { _, err := kv.Get(ctx, key); return err }(), datastore.ErrNotFound,
		fmt.Sprintf(`key %q: resource does not exist`, key))
	wantErr(t, "delete deleted", kv.Delete(ctx, key, 0), datastore.ErrNotFound, "")
	_, err = kv.Update(ctx, datastore.KVPair{Key: key, Value: []byte("x")})
	wantErr(t, "update deleted", err, datastore.ErrNotFound, "")
}

// testConcurrentCAS has writers race read-modify-write cycles on one
// resource; compare-and-swap must make every increment count exactly once.
func testConcurrentCAS(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	mustCreate(t, s, pool("counter", "10.1.0.0/16"))
	key := datastore.Key{Kind: "IPPool", Name: "counter"}
	const writers, increments = 4, 10
	errs := make(chan error, writers)
	conflicts := make(chan int, writers)
	for w := 0; w < writers; w++ {
		go func() {
			lost := 0
			for i := 0; i < increments; {
				cur, err := s.Get(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				p := cur.(*v3.IPPool)
				p.Spec.BlockSize++
				if _, err := s.Update(ctx, p); errors.Is(err, datastore.ErrConflict) {
					lost++
					continue
				} else if err != nil {
					errs <- err
					return
				}
				i++
			}
			conflicts <- lost
			errs <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.(*v3.IPPool).Spec.BlockSize; n != writers*increments {
		t.Fatalf("counter = %d after %d increments: compare-and-swap lost or doubled writes", n, writers*increments)
	}
	lost := 0
	for w := 0; w < writers; w++ {
		lost += <-conflicts
	}
	t.Logf("%d conflicts retried", lost)
}
