package kubecontrollers

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestLeaderElection runs two replicas on one lease: exactly one leads
// (the other stands by, ready to take over), and only the leader writes.
// When the leader stops, the standby takes the lease and catches up;
// when a leader is cut off from the API server it stops leading before
// the lease it held can pass to another replica.
func TestLeaderElection(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	ns := "l-" + uniq()
	namespace(t, c, ns, nil)
	lease := "kcc-" + uniq()
	env := map[string]string{"ENABLED_CONTROLLERS": "policy"}
	au, _ := url.Parse(c.URL)
	relayA := newRelay(t, au.Host)
	rcA := rest.CopyConfig(c.Config)
	rcA.Host = "https://" + relayA.addr
	a := start(t, rcA, etcd, lease, env)
	a.waitReady(true, 30*time.Second)
	b := start(t, c.Config, etcd, lease, env)
	rb := b.waitReady(false, 30*time.Second)
	if rb.Leader {
		t.Fatal("both replicas lead")
	}
	nps := c.Client.NetworkingV1().NetworkPolicies(ns)
	if _, err := nps.Create(ctx, netpol(ns, "first", 80, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, func() error { return wantPolicy(c, s, ns, "first") })
	if r, _, _ := b.report(); r.Leader || len(r.Controllers) != 0 {
		t.Errorf("the standby runs controllers: %+v", r)
	}

	// The leader is cut off from the API server: it must stop leading
	// (its renew deadline is 2s) before its 3s lease lets b take over.
	relayA.cut()
	eventually(t, 3*time.Second, func() error {
		select {
		case err := <-a.done:
			a.done <- nil // for stop
			if err != ErrLostLeadership {
				return fmt.Errorf("the cut-off leader's Run returned %v, want ErrLostLeadership", err)
			}
			return nil
		default:
			return fmt.Errorf("the cut-off leader still runs")
		}
	})
	b.waitReady(true, 10*time.Second)
	if _, err := nps.Create(ctx, netpol(ns, "second", 81, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, func() error { return wantPolicy(c, s, ns, "second") })

	// A new replica stands by; the leader stops (releasing the lease),
	// and the new one leads within a retry period.
	relayA.restore()
	a2 := start(t, c.Config, etcd, lease, env)
	a2.waitReady(false, 30*time.Second)
	if err := nps.Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.stop()
	began := time.Now()
	a2.waitReady(true, 10*time.Second)
	t.Logf("the standby led %s after the leader stopped", time.Since(began).Round(time.Millisecond))
	eventually(t, 2*time.Second, func() error {
		return absent(s, keyOfPolicy(ns, "first"))
	})
}
