package calc

import (
	"context"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestSyncerOverBadValues: a syncer started (as felix restarting) while
// bad values sit under every prefix it reads still gets in sync with the
// good resources; an IPPool stored under a policy key is no policy; and a
// bad value written over a good endpoint later removes that endpoint, as
// a fresh list would see it, while new good resources keep flowing.
func TestSyncerOverBadValues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := etcdtest.NewStore(t, etcdtest.Start(t))
	put := func(key, value string) {
		t.Helper()
		if _, err := store.Client().Put(ctx, datastore.ResourcePrefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range SyncedKinds() {
		info, _ := v3.KindByName(kind)
		key := info.Plural + "/bad"
		if info.Namespaced {
			key = info.Plural + "/ns1/bad"
		}
		put(key, `{"kind":`)
	}
	put("globalnetworkpolicies/disguised", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"disguised"},"spec":{"cidr":"10.8.0.0/16"}}`)
	pol := gnp("allow-db", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
		s.Tier = "default"
		s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "app == 'db'"})}
	})
	for _, r := range []v3.Resource{
		wep("ns1", "web", testNode, "10.0.0.1", map[string]string{"app": "web"}),
		wep("ns1", "db", "other", "10.0.0.2", map[string]string{"app": "db"}),
		pol,
	} {
		if _, err := store.Create(ctx, r); err != nil {
			t.Fatalf("create %s: %v", datastore.KeyOf(r), err)
		}
	}
	rec := newRecorder()
	v := &view{items: map[datastore.Key]v3.Resource{}, graph: NewGraph(testNode, rec), rec: rec}
	go func() { _ = NewSyncer(store, testNode, v).Run(ctx) }()

	v.wait(t, "in sync beside bad values", func() bool { return v.inSync })
	v.mu.Lock()
	if len(v.items) != 3 {
		t.Errorf("after sync %d items, want the 3 good ones: %v", len(v.items), v.items)
	}
	p := rec.policies[pid("", "allow-db")]
	if p == nil || len(rec.policies) != 1 {
		t.Fatalf("active policies after sync: %v, want allow-db only (an IPPool under a policy key is no policy)", rec.policies)
	}
	setID := p.Inbound[0].SrcIPSets[0]
	v.mu.Unlock()

	put("workloadendpoints/ns1/"+wep("ns1", "db", "other", "", nil).Name, `[]`)
	v.wait(t, "the endpoint a bad value replaced leaves the set", func() bool { return len(rec.sets[setID]) == 0 })
	if _, err := store.Create(ctx, wep("ns2", "db2", "other", "10.0.0.3", map[string]string{"app": "db"})); err != nil {
		t.Fatal(err)
	}
	v.wait(t, "a new endpoint after the bad value", func() bool { m := rec.sets[setID]; return len(m) == 1 && m["10.0.0.3"] })
	if n := store.BadValues().Total(); n < uint64(len(SyncedKinds())+2) {
		t.Errorf("%d bad values counted, want at least %d", n, len(SyncedKinds())+2)
	}
}
