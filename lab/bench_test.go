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
