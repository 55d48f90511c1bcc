package kubecontrollers

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestReadinessFollowsOutages cuts etcd, then the API server, away from
// a running leader: /readiness turns false (naming what is unreachable)
// while /liveness stays true, and when each comes back the controllers
// catch up by themselves with what changed meanwhile.
func TestReadinessFollowsOutages(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	eu, _ := url.Parse(etcd[0])
	etcdRelay := newRelay(t, eu.Host)
	au, _ := url.Parse(c.URL)
	apiRelay := newRelay(t, au.Host)
	rc := rest.CopyConfig(c.Config)
	rc.Host = "https://" + apiRelay.addr
	ns := "h-" + uniq()
	namespace(t, c, ns, nil)
	// A long lease, so the API server outage does not cost the lease.
	in := start(t, rc, []string{"http://" + etcdRelay.addr}, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "policy,namespace",
		"LEASE_DURATION": "30s", "LEASE_RENEW_DEADLINE": "20s", "LEASE_RETRY_PERIOD": "1s"})
	in.waitReady(true, 30*time.Second)

	notReady := func(what string) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			r, code, err := in.report()
			if err != nil {
				return err
			}
			if code == 200 || r.Ready {
				return fmt.Errorf("still ready: %+v", r)
			}
			field := r.Etcd
			if what == "kube-apiserver" {
				field = r.APIServer
			}
			if !strings.Contains(field, what) {
				return fmt.Errorf("not ready, but not for %s: %+v", what, r)
			}
			if !r.Live {
				return fmt.Errorf("not live: %+v", r)
			}
			return nil
		})
	}

	etcdRelay.cut()
	notReady("etcd")
	nps := c.Client.NetworkingV1().NetworkPolicies(ns)
	if _, err := nps.Create(ctx, netpol(ns, "during-etcd-outage", 80, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the write fails and backs off
	etcdRelay.restore()
	in.waitReady(true, 30*time.Second)
	eventually(t, 35*time.Second, func() error { return wantPolicy(c, s, ns, "during-etcd-outage") })

	apiRelay.cut()
	notReady("kube-apiserver")
	if _, err := nps.Create(ctx, netpol(ns, "during-api-outage", 81, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiRelay.restore()
	in.waitReady(true, 30*time.Second)
	eventually(t, 30*time.Second, func() error { return wantPolicy(c, s, ns, "during-api-outage") })
}
