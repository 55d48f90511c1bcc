package lab

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkUpToReachable measures a whole fabric coming up: from Up to
// every pod reaching every other one (one pod per node, the demo topology:
// mesh off, a BIRD 2 route reflector). It reports s-to-reach, and inside
// it s-to-agents (every calico-node serving) and s-to-bgp (then every
// session Established). No reference exists to compare with.
func BenchmarkUpToReachable(b *testing.B) {
	for _, nodes := range []int{3, 10} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			requireLab(b)
			var reach, agents, sessions time.Duration
			for i := 0; i < b.N; i++ {
				began := time.Now()
				l := upForBench(b, nodes)
				addPods(b, l, "bench", 1)
				ctx := context.Background()
				if _, err := l.WaitPodRoutes(ctx, 60*time.Second); err != nil {
					b.Fatal(err)
				}
				if _, err := l.WaitReachable(ctx, 30*time.Second); err != nil {
					b.Fatal(err)
				}
				reach += time.Since(began)
				agents += l.UpTimes().Agents
				sessions += l.UpTimes().Sessions
				b.StopTimer()
				if err := l.Down(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(reach.Seconds()/n, "s-to-reach")
			b.ReportMetric(agents.Seconds()/n, "s-to-agents")
			b.ReportMetric(sessions.Seconds()/n, "s-to-bgp")
		})
	}
}

// upForBench brings up a lab that the benchmark removes itself (and the
// cleanup removes if the benchmark fails first).
func upForBench(b *testing.B, nodes int) *Lab {
	b.Helper()
	l, err := Up(context.Background(), Options{Name: fmt.Sprintf("bench%d", nodes), Nodes: nodes, RR: RRBird2, BinDir: binDir, StateRoot: testRoot})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if o, err := Open(testRoot, l.Name(), nil); err == nil {
			_ = o.Down(context.Background())
		}
	})
	return l
}

// BenchmarkEtcdOutageRecovery measures how long after etcd answers again a
// policy written at that moment is enforced, after the external etcd was
// killed or frozen for 20, 60 and 150 s, and after the calico-node serving
// the embedded etcd was frozen for 150 s. It reports s-recovery and, as
// x/ref, its ratio to the same policy's enforcement with etcd up all
// along, measured first in the same lab: a ratio that does not grow with
// the outage is the point.
func BenchmarkEtcdOutageRecovery(b *testing.B) {
	requireLab(b)
	type outage struct {
		name string
		d    time.Duration
		take func(testing.TB, *Lab) (func(), func() time.Time)
	}
	run := func(b *testing.B, o Options, src, dst string, outages []outage) {
		l := newLab(b, o)
		ol := newOutageLab(b, l, src, dst)
		began, _, enforced := ol.enforce(b, 10*time.Second)
		ref := enforced.Sub(began)
		b.Logf("with etcd up, the policy is enforced %s after calicoctl apply begins", ref.Round(time.Millisecond))
		for _, c := range outages {
			b.Run(fmt.Sprintf("%s=%s", c.name, c.d), func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					down, up := c.take(b, l)
					total += ol.outage(b, c.d, down, up)
				}
				rec := total / time.Duration(b.N)
				b.ReportMetric(rec.Seconds(), "s-recovery")
				b.ReportMetric(rec.Seconds()/ref.Seconds(), "x/ref")
			})
		}
	}
	b.Run("external", func(b *testing.B) {
		var os []outage
		for _, d := range []time.Duration{20 * time.Second, 60 * time.Second, 150 * time.Second} {
			os = append(os, outage{"killed", d, stopExternal}, outage{"frozen", d, freezeExternal})
		}
		run(b, Options{Nodes: 2, Etcd: EtcdExternal}, "node1", "node2", os)
	})
	b.Run("embedded", func(b *testing.B) {
		run(b, Options{Nodes: 3}, "node2", "node3", []outage{{"frozen", 150 * time.Second, freezeEmbedded}})
	})
}
