package etcdproxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdproxy"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, cfg etcdproxy.Config) *etcdproxy.Server {
	t.Helper()
	s, err := etcdproxy.Start(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func pool(name, cidr string) *v3.IPPool {
	return &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr}}
}

// next waits for one event of w.
func next(t *testing.T, w datastore.Watcher) datastore.Event {
	t.Helper()
	select {
	case e, ok := <-w.Events():
		if !ok {
			t.Fatal("watch channel closed")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return datastore.Event{}
}

// etcdWatchers is the embedded etcd's count of watchers
// (etcd_debugging_mvcc_watcher_total, in this process's registry).
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_debugging_mvcc_watcher_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("etcd_debugging_mvcc_watcher_total not found")
	return 0
}

// TestProxyTLS: agents with a client certificate from the CA use etcd
// through the proxy; a client without one, or with another CA's, is
// refused; many agents' watches of one range are one etcd watcher.
func TestProxyTLS(t *testing.T) {
	eps, files := etcdtest.StartTLS(t)
	up := etcdcore.Config{Endpoints: eps, CACertFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	px := start(t, etcdproxy.Config{Listen: "127.0.0.1:0", Upstream: up,
		CertFile: files.ServerCert, KeyFile: files.ServerKey, ClientCAFile: files.CA})
	via := up
	via.Endpoints = []string{"https://" + px.Addr().String()}
	ctx := testCtx(t)

	const agents = 20
	before := etcdWatchers(t)
	var ws []datastore.Watcher
	for i := range agents {
		s, err := etcdv3.New(ctx, via)
		if err != nil {
			t.Fatalf("agent %d through the proxy: %v", i, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		items, rev, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.WatchListed(ctx, datastore.ListOptions{Kind: v3.KindIPPool}, rev, items)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		ws = append(ws, w)
	}
	direct, err := etcdv3.New(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	if _, err := direct.Create(ctx, pool("a", "10.1.0.0/16")); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if e := next(t, w); e.Type != datastore.Added || e.Object.GetObjectMeta().Name != "a" {
			t.Fatalf("agent %d: got %v %v, want Added a", i, e.Type, e.Object)
		}
	}
	// The proxy merges the agents' watches of the range into one (and
	// keeps one of its own that tells it etcd has lost its leader).
	if got := etcdWatchers(t) - before; got < 1 || got > 3 {
		t.Errorf("%d agents watching IPPools through the proxy are %v etcd watchers, want 2 (3 while merging)", agents, got)
	}

	for name, cfg := range map[string]etcdcore.Config{
		"no client certificate":           {Endpoints: via.Endpoints, CACertFile: files.CA},
		"another CA's client certificate": otherClient(t, via.Endpoints, files.CA),
	} {
		cfg.DialTimeout = 2 * time.Second
		if s, err := etcdv3.New(ctx, cfg); err == nil {
			_ = s.Close()
			t.Errorf("%s: connected through the proxy, want refused", name)
		}
	}
}

// otherClient is a configuration trusting the proxy's CA but presenting
// a client certificate of another CA.
func otherClient(t *testing.T, endpoints []string, ca string) etcdcore.Config {
	other := etcdtest.GenerateTLS(t, t.TempDir())
	return etcdcore.Config{Endpoints: endpoints, CACertFile: ca, CertFile: other.ClientCert, KeyFile: other.ClientKey}
}

// TestProxyNeedsTLSOffLoopback: the proxy serves in the clear only on a
// loopback address, and half a TLS configuration is refused.
func TestProxyNeedsTLSOffLoopback(t *testing.T) {
	up := etcdcore.Config{Endpoints: etcdtest.Start(t)}
	for _, tc := range []struct {
		name string
		cfg  etcdproxy.Config
		want string
	}{
		{"clear on every address", etcdproxy.Config{Listen: "0.0.0.0:0", Upstream: up}, "needs TLS"},
		{"clear on a host name", etcdproxy.Config{Listen: "proxy.example:0", Upstream: up}, "needs TLS"},
		{"no client CA", etcdproxy.Config{Listen: "127.0.0.1:0", Upstream: up, CertFile: "c.pem", KeyFile: "k.pem"}, "client CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := etcdproxy.Start(testCtx(t), tc.cfg)
			if err == nil {
				s.Stop()
				t.Fatalf("started; want an error saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	start(t, etcdproxy.Config{Listen: "127.0.0.1:0", Upstream: up})
}

// TestProxyCompaction: a watcher through the proxy whose history is
// compacted lists again through it and reports each deletion with the
// resource's key and last revision.
func TestProxyCompaction(t *testing.T) {
	eps := etcdtest.Start(t)
	px := start(t, etcdproxy.Config{Listen: "127.0.0.1:0", Upstream: etcdcore.Config{Endpoints: eps}})
	ctx := testCtx(t)
	direct := etcdtest.NewStore(t, eps)
	agent := etcdtest.NewStore(t, []string{"http://" + px.Addr().String()})
	var held []v3.Resource
	for i := range 3 {
		r, err := direct.Create(ctx, pool(fmt.Sprint("p", i), fmt.Sprintf("10.%d.0.0/16", i)))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	items, rev, err := agent.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil || len(items) != 3 {
		t.Fatalf("list through the proxy: %d items, %v", len(items), err)
	}
	// Before the agent watches, p1 goes and the history is compacted.
	if _, err := direct.Delete(ctx, datastore.KeyOf(held[1]), ""); err != nil {
		t.Fatal(err)
	}
	_, now, _ := direct.List(ctx, datastore.ListOptions{})
	n, _ := datastore.ParseRevision(now)
	if _, err := direct.Client().Compact(ctx, n, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	w, err := agent.WatchListed(ctx, datastore.ListOptions{Kind: v3.KindIPPool}, rev, items)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e := next(t, w)
	m := e.Object.GetObjectMeta()
	if e.Type != datastore.Deleted || m.Name != "p1" || m.ResourceVersion != held[1].GetObjectMeta().ResourceVersion || e.Revision != now {
		t.Fatalf("got %v of %s@%s at %s; want Deleted p1@%s at %s", e.Type, m.Name, m.ResourceVersion, e.Revision,
			held[1].GetObjectMeta().ResourceVersion, now)
	}
	if _, err := direct.Create(ctx, pool("p3", "10.3.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if e := next(t, w); e.Type != datastore.Added || e.Object.GetObjectMeta().Name != "p3" {
		t.Fatalf("after resyncing: %v %v, want Added p3", e.Type, e.Object)
	}
}
