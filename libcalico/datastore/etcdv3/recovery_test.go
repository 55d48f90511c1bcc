package etcdv3_test

import (
	"fmt"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// recoverWithin bounds how long after etcd answers again a change made at
// that moment may take to reach a watcher. The client's reconnection
// backoff is capped at a second; the rest is room for a busy machine.
const recoverWithin = 2 * time.Second

// TestWatchRecoversAfterOutage: etcd goes away from a watcher, refused (as
// a stopped etcd) or hung (as a frozen one, long enough for the client's
// keepalive to give the connection up), for 2 s and for 20 s. A change
// made the moment etcd is back reaches the watcher within recoverWithin,
// however long the outage was: the client's backoff does not grow with it.
func TestWatchRecoversAfterOutage(t *testing.T) {
	endpoints := etcdtest.Start(t)
	direct := connect(t, endpoints)
	wipe(t, direct)
	for _, mode := range []string{"refused", "hung"} {
		for _, outage := range []time.Duration{2 * time.Second, 20 * time.Second} {
			t.Run(fmt.Sprintf("%s/%s", mode, outage), func(t *testing.T) {
				t.Parallel()
				took := watchOutage(t, direct, endpoints[0], mode, outage)
				t.Logf("%s for %s: the change arrived %s after etcd was back", mode, outage, took.Round(time.Millisecond))
				if took > recoverWithin {
					t.Errorf("%s for %s: the change arrived %s after etcd was back, want at most %s", mode, outage, took, recoverWithin)
				}
			})
		}
	}
}

// watchOutage watches IPPools through a relay, takes etcd away for
// outage, and returns how long after its return a change made then took
// to arrive.
func watchOutage(t *testing.T, direct datastore.Interface, endpoint, mode string, outage time.Duration) time.Duration {
	ctx := testCtx(t)
	relay := etcdtest.StartRelay(t, endpoint)
	s := connect(t, []string{relay.Endpoint()})
	name := fmt.Sprintf("%s-%d", mode, outage/time.Second)
	w, err := s.Watch(ctx, datastore.ListOptions{Kind: v3.KindIPPool}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	arrived := func(cidr string) time.Time {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case e, ok := <-w.Events():
				if !ok {
					t.Fatalf("watch ended")
				}
				if p, isPool := e.Object.(*v3.IPPool); isPool && p.Name == name && p.Spec.CIDR == cidr {
					return time.Now()
				}
			case <-deadline:
				t.Fatalf("pool %s %s never arrived", name, cidr)
			}
		}
	}
	created := mustCreate(t, direct, pool(name, "10.9.0.0/16"))
	arrived("10.9.0.0/16")

	if mode == "refused" {
		relay.Refuse()
	} else {
		relay.Hang()
	}
	time.Sleep(outage)
	if err := relay.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	changed := clonePool(t, created.(*v3.IPPool))
	changed.Spec.CIDR = "10.10.0.0/16"
	if _, err := direct.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	return arrived("10.10.0.0/16").Sub(back)
}
