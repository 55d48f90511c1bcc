package lab

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestEtcdClusterMemberLost: with a three-member etcd cluster, one member
// is killed (SIGKILL) and brought back, then the leader is. Meanwhile
// packets stream both ways between two pods and pods are added and
// deleted on both nodes without pause: no packet is lost, no CNI call
// fails beyond one retry, and a policy change made while a member is down
// is enforced within a second of its write.
func TestEtcdClusterMemberLost(t *testing.T) {
	l := newLab(t, Options{Nodes: 2, Etcd: EtcdCluster})
	ol := newOutageLab(t, l, "node1", "node2")
	ctx := context.Background()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls, retried int
	var failures []string
	for _, node := range []string{"node1", "node2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A kubelet retries a failed call a moment later; one retry
			// is all a lost member may cost.
			try := func(what string, op func() error) {
				err := op()
				mu.Lock()
				calls++
				if err != nil {
					retried++
				}
				mu.Unlock()
				if err == nil {
					return
				}
				t.Logf("%s failed once (retried in a second): %v", what, err)
				time.Sleep(time.Second)
				if err = op(); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s failed twice: %v", what, err))
					mu.Unlock()
				}
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("churn-%s-%d", node, i)
				try("ADD "+name, func() error { _, err := l.AddPod(ctx, node, "churn", name); return err })
				if _, ok := l.Pod("churn/" + name); ok {
					try("DEL "+name, func() error { return l.DelPod(ctx, "churn/"+name) })
				}
			}
		}()
	}
	var fwd, back stream
	streaming := 20 * time.Second
	wg.Add(2)
	go func() { defer wg.Done(); fwd = runStream(t, l, ol.src, ol.dst, 7301, 100, streaming, nil) }()
	go func() { defer wg.Done(); back = runStream(t, l, ol.dst, ol.src, 7302, 100, streaming, nil) }()
	began := time.Now()

	lose := func(which, member string) {
		t.Helper()
		t.Logf("%.1fs into the streams: killing the %s %s", time.Since(began).Seconds(), which, member)
		if err := l.StopEtcd(member, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		writing, applied, enforced := ol.enforce(t, 10*time.Second)
		took := enforced.Sub(applied)
		t.Logf("%s %s killed: calicoctl apply took %s, the policy was enforced %s after it returned", which, member,
			applied.Sub(writing).Round(time.Millisecond), took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("%s %s killed: the policy was enforced %s after calicoctl apply returned, want within a second", which, member, took)
		}
		if err := l.StartEtcd(ctx, member); err != nil {
			t.Fatal(err)
		}
		t.Logf("%.1fs into the streams: %s back", time.Since(began).Seconds(), member)
	}
	leader, err := l.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range l.EtcdMembers() {
		if m != leader {
			lose("follower", m)
			break
		}
	}
	// A call that failed during the first outage retries a second later;
	// the second outage waits until that retry is over, so each call
	// meets at most one lost member.
	time.Sleep(2 * time.Second)
	if leader, err = l.EtcdLeader(ctx); err != nil {
		t.Fatal(err)
	}
	lose("leader", leader)
	if d := time.Since(began); d > streaming-2*time.Second {
		t.Errorf("losing the members took %s, longer than the packet streams watch (%s)", d, streaming)
	}
	// The streams end on their own; the churn runs as long.
	time.Sleep(time.Until(began.Add(streaming)))
	close(stop)
	wg.Wait()
	for name, st := range map[string]stream{"node1→node2": fwd, "node2→node1": back} {
		if st.arrived != st.sent {
			t.Errorf("%s: %d of %d packets arrived (100 a second from the start); lost %v…", name, st.arrived, st.sent, st.lost)
		}
	}
	if t.Failed() {
		for _, n := range l.Nodes() {
			routes, _ := l.Routes(ctx, n.Name)
			t.Logf("%s routes at the end:\n%s", n.Name, routes)
		}
	}
	t.Logf("%d CNI calls, %d retried once", calls, retried)
	for _, f := range failures {
		t.Error(f)
	}
	if calls < 20 {
		t.Errorf("only %d CNI calls were made", calls)
	}
}
