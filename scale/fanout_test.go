package scale

import (
	"context"
	"testing"
	"time"
)

// TestFanOutSmall runs the etcd fan-out measurement with a few agents
// against a real etcd: every agent gets every change (the measurement
// fails otherwise) and the figures are plausible.
func TestFanOutSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := FanOut(ctx, []int{5, 20}, FanOutConfig{Members: 1, Changes: 2, Dir: t.TempDir(),
		Cluster: Cluster{PodsPerNode: 2, Namespaces: 5, Policies: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 2 {
		t.Fatalf("%d points, want 2: %v", len(s.Points), s.Notes)
	}
	for _, p := range s.Points {
		t.Logf("%d agents: %v", p.N, p.Values)
		if p.Values["policy_p99_ms"] <= 0 || p.Values["wep_p99_ms"] <= 0 {
			t.Errorf("%d agents: no delivery time: %v", p.N, p.Values)
		}
		if w := p.Values["etcd_watchers"]; w < float64(13*p.N) {
			t.Errorf("%d agents: etcd holds %v watchers, want 13 per agent", p.N, w)
		}
		if p.Values["etcd_kib"] <= 0 || p.Values["bgp_round_kib"] <= 0 {
			t.Errorf("%d agents: etcd sent nothing: %v", p.N, p.Values)
		}
	}
	if a, b := s.Points[0].Values["etcd_kib"], s.Points[1].Values["etcd_kib"]; b <= a {
		t.Errorf("etcd's bytes per change did not grow with the watchers: %.1f KiB at 5, %.1f at 20", a, b)
	}
}
