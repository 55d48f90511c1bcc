package scale

import (
	"context"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
)

// TestFanOutCacheSmall runs agents (felix's syncer, one etcd client each)
// through two fan-out caches against a real etcd: every agent gets every
// change (the measurement fails otherwise), and etcd serves the caches'
// watches, not the agents'.
func TestFanOutCacheSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const agents, perCache = 20, 10
	s, err := FanOut(ctx, []int{agents}, FanOutConfig{Members: 1, Changes: 2, Dir: t.TempDir(), AgentsPerCache: perCache,
		Cluster: Cluster{PodsPerNode: 2, Namespaces: 5, Policies: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 1 {
		t.Fatalf("%d points, want 1: %v", len(s.Points), s.Notes)
	}
	p := s.Points[0]
	t.Logf("%d agents through %d caches: %v", agents, agents/perCache, p.Values)
	if p.Values["policy_p99_ms"] <= 0 || p.Values["wep_p99_ms"] <= 0 {
		t.Errorf("no delivery time: %v", p.Values)
	}
	if p.Values["cache_rss_mb"] <= 0 {
		t.Errorf("no cache process measured: %v", p.Values)
	}
	// Without the cache etcd sends every agent each change (~0.85 KiB
	// each, 17 KiB for 20: TestFanOutSmall); with it, each cache.
	if kib := p.Values["etcd_kib"]; kib > 0.85*agents/4 {
		t.Errorf("etcd sent %.1f KiB per change to %d caches, want about one agent's share per cache", kib, agents/perCache)
	}
	// Each agent watches one range per kind felix reads; without the
	// cache etcd would hold that many watchers per agent, with it that
	// many per cache, plus up to three of the cache's own (its watch for
	// etcd losing its leader, and those open while two watches of a
	// range are being merged).
	ranges := len(calc.SyncedKinds())
	if w, most := p.Values["etcd_watchers"], float64((ranges+3)*agents/perCache); w > most {
		t.Errorf("etcd holds %v watchers for %d agents behind %d caches, want at most %v", w, agents, agents/perCache, most)
	}
}
