package scale

import "testing"

// TestCalcGraphSmall runs the calculation-graph measurement at small
// sizes, so make test keeps the harness working: the local endpoints
// reach the dataplane, the heap grows with the cluster and a churn costs
// dataplane work.
func TestCalcGraphSmall(t *testing.T) {
	s, err := CalcGraph([]int{10, 40}, Cluster{PodsPerNode: 30, Namespaces: 100, Policies: 1000}, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 2 {
		t.Fatalf("%d points, want 2", len(s.Points))
	}
	small, big := s.Points[0].Values, s.Points[1].Values
	t.Logf("10 nodes: %v", small)
	t.Logf("40 nodes: %v", big)
	if big["heap_mb"] <= small["heap_mb"] {
		t.Errorf("graph heap did not grow with the cluster: %.2f MiB at 10 nodes, %.2f at 40", small["heap_mb"], big["heap_mb"])
	}
	if big["policies_active"] == 0 || big["ipsets"] == 0 {
		t.Errorf("no active policy or IP set: %v", big)
	}
	if big["churn_us"] <= 0 {
		t.Errorf("no churn measured: %v", big)
	}
}
