package scale

import (
	"context"
	"testing"
	"time"
)

// TestIPAMStormSmall runs the start-up storm with a few nodes against a
// real etcd: every node gets its addresses, none twice (the measurement
// fails otherwise), and each claims a block of its own.
func TestIPAMStormSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := IPAMStorm(ctx, []int{4, 16}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 2 {
		t.Fatalf("%d points, want 2: %v", len(s.Points), s.Notes)
	}
	for _, p := range s.Points {
		t.Logf("%d nodes: %v", p.N, p.Values)
		if p.Values["blocks"] < float64(p.N) {
			t.Errorf("%d nodes claimed %v blocks, want one each at least", p.N, p.Values["blocks"])
		}
	}
}
