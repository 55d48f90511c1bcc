package scale

import (
	"math"

	"gonum.org/v1/gonum/stat"
)

// Growth is a fitted model y = A + B·f(N).
type Growth struct {
	// Model names f: "linear" (N), "N log N" or "quadratic" (N²).
	Model string
	A, B  float64
	// R2 is the coefficient of determination of the fit.
	R2 float64
}

// At is the model's value at n.
func (g Growth) At(n float64) float64 { return g.A + g.B*growthModels[g.Model](n) }

var growthModels = map[string]func(float64) float64{
	"linear":    func(n float64) float64 { return n },
	"N log N":   func(n float64) float64 { return n * math.Log(n) },
	"quadratic": func(n float64) float64 { return n * n },
}

// FitGrowth fits y against N with each model by least squares and
// returns the one with the smallest residual (models have the same
// number of parameters). It needs three points or more.
func FitGrowth(ns, ys []float64) (Growth, bool) {
	if len(ns) < 3 || len(ns) != len(ys) {
		return Growth{}, false
	}
	best, bestSSE := Growth{}, math.Inf(1)
	for _, name := range []string{"linear", "N log N", "quadratic"} { // ties: the simpler
		f := growthModels[name]
		xs := make([]float64, len(ns))
		for i, n := range ns {
			xs[i] = f(n)
		}
		a, b := stat.LinearRegression(xs, ys, nil, false)
		sse := 0.0
		for i := range xs {
			r := ys[i] - (a + b*xs[i])
			sse += r * r
		}
		if sse < bestSSE*0.98 {
			best, bestSSE = Growth{Model: name, A: a, B: b, R2: stat.RSquaredFrom(fitted(xs, a, b), ys, nil)}, sse
		}
	}
	return best, true
}

func fitted(xs []float64, a, b float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = a + b*x
	}
	return out
}
