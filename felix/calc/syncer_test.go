package calc

import (
	"context"
	"sync"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// view applies the syncer's output to a key→resource map and to a Graph.
type view struct {
	mu     sync.Mutex
	items  map[datastore.Key]v3.Resource
	inSync bool
	graph  *Graph
	rec    *recorder
}

func (v *view) OnUpdates(us []Update) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, u := range us {
		if u.Value == nil {
			delete(v.items, u.Key)
		} else {
			v.items[u.Key] = u.Value
		}
	}
	v.graph.OnUpdates(us)
	v.graph.Flush()
}

func (v *view) OnInSync() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inSync = true
	v.graph.OnInSync()
	v.graph.Flush()
}

func (v *view) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v.mu.Lock()
		ok := cond()
		v.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestSyncerAgainstEtcd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := etcdtest.NewStore(t, etcdtest.Start(t))
	fc := func(name string) *v3.FelixConfiguration {
		return &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: name},
			Spec: v3.FelixConfigurationSpec{ChainInsertMode: "Append"}}
	}
	pol := gnp("allow-db", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
		s.Tier = "default"
		s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "app == 'db'"})}
	})
	for _, r := range []v3.Resource{
		fc("default"), fc("node." + testNode), fc("node.other"),
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
	done := make(chan error, 1)
	go func() { done <- NewSyncer(store, testNode, v).Run(ctx) }()

	v.wait(t, "in sync", func() bool { return v.inSync })
	v.mu.Lock()
	if len(v.items) != 5 {
		t.Errorf("after sync %d items, want 5 (node.other filtered out): %v", len(v.items), v.items)
	}
	if _, ok := v.items[datastore.Key{Kind: v3.KindFelixConfiguration, Name: "node.other"}]; ok {
		t.Error("node.other FelixConfiguration was passed on")
	}
	p := rec.policies[pid("", "allow-db")]
	if p == nil {
		t.Fatal("policy not active after sync")
	}
	setID := p.Inbound[0].SrcIPSets[0]
	v.mu.Unlock()

	// Changes after the sync flow through the watch.
	if _, err := store.Create(ctx, wep("ns2", "db2", "other", "10.0.0.3", map[string]string{"app": "db"})); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Delete(ctx, datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: "ns1", Name: "db"}, ""); err != nil {
		t.Fatal(err)
	}
	v.wait(t, "set members 10.0.0.3 only", func() bool {
		m := rec.sets[setID]
		return len(m) == 1 && m["10.0.0.3"]
	})
	if _, err := store.Delete(ctx, datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: "allow-db"}, ""); err != nil {
		t.Fatal(err)
	}
	v.wait(t, "policy and set removed", func() bool { return len(rec.policies) == 0 && rec.sets[setID] == nil })
	v.mu.Lock()
	if len(rec.errs) > 0 {
		t.Errorf("order violations: %v", rec.errs)
	}
	v.mu.Unlock()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
