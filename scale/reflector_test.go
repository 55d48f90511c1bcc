package scale

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestBGPSmall runs the route-reflector and mesh measurements with a few
// clients in a namespace of their own (root; run under the kernel lock
// like every namespace test): both reflectors give every client every
// other client's block, and the node in the mesh gives every peer its
// own.
func TestBGPSmall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	if _, err := os.Stat(birdBinary); err != nil {
		t.Skipf("%s not installed", birdBinary)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	series, err := BGP(ctx, []int{5, 20}, BGPParts, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 3 || len(series[0].Points) != 2 || len(series[1].Points) != 1 || len(series[2].Points) != 2 {
		t.Fatalf("got %+v, want 2 reflector points, 1 mesh point and 2 speaker-read points", series)
	}
	for _, s := range series {
		for _, p := range s.Points {
			t.Logf("%s %d: %v", s.Name, p.N, p.Values)
		}
	}
	rr := series[0].Points[1].Values
	for _, k := range []string{"ours_converge_s", "bird_converge_s", "ours_rss_mb", "bird_rss_mb", "ours_peak_mb", "bird_peak_mb"} {
		if rr[k] <= 0 {
			t.Errorf("reflector at 20 clients: %s = %v", k, rr[k])
		}
	}
	if m := series[1].Points[0].Values; m["mesh_rss_mb"] <= 0 {
		t.Errorf("mesh: no node memory: %v", m)
	}
}
