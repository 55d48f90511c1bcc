package scale

import (
	"math"
	"testing"
)

// TestFitGrowth: each model is recognised from its own points and
// extrapolates them.
func TestFitGrowth(t *testing.T) {
	ns := []float64{100, 250, 500, 1000}
	for _, tc := range []struct {
		model string
		f     func(float64) float64
	}{
		{"linear", func(n float64) float64 { return 3 + 2*n }},
		{"N log N", func(n float64) float64 { return 1 + 0.5*n*math.Log(n) }},
		{"quadratic", func(n float64) float64 { return 7 + 0.01*n*n }},
	} {
		ys := make([]float64, len(ns))
		for i, n := range ns {
			ys[i] = tc.f(n)
		}
		g, ok := FitGrowth(ns, ys)
		if !ok || g.Model != tc.model {
			t.Errorf("%s: fitted %+v", tc.model, g)
			continue
		}
		if got, want := g.At(5000), tc.f(5000); math.Abs(got-want) > 1e-6*want {
			t.Errorf("%s: at 5000 %v, want %v", tc.model, got, want)
		}
	}
	if _, ok := FitGrowth(ns[:2], ns[:2]); ok {
		t.Error("fitted two points")
	}
}
