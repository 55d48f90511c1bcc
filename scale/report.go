package scale

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// ExtrapolateTo is the cluster size the report extrapolates to.
const ExtrapolateTo = 5000

// WriteTable writes each series as a Markdown table (one row per size,
// one column per metric), then, per metric, the fitted growth and its
// value at ExtrapolateTo nodes where the series stops short of it.
func WriteTable(w io.Writer, series []Series) {
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n", s.Name)
		head := []string{"N"}
		for _, m := range s.Metrics {
			t := m.Title
			if m.Unit != "" {
				t += " (" + m.Unit + ")"
			}
			head = append(head, t)
		}
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, p := range s.Points {
			row := []string{fmt.Sprint(p.N)}
			for _, m := range s.Metrics {
				v, ok := p.Values[m.Key]
				if !ok {
					row = append(row, "–")
					continue
				}
				row = append(row, formatValue(v))
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
		fmt.Fprintln(w)
		var ns []float64
		for _, p := range s.Points {
			ns = append(ns, float64(p.N))
		}
		largest := s.Points[len(s.Points)-1].N
		if len(ns) >= 3 {
			fmt.Fprintf(w, "| fit | growth | y = a + b·f(N) | R² | at %d |\n|---|---|---|---|---|\n", ExtrapolateTo)
			for _, m := range s.Metrics {
				var ys, xs []float64
				for i, p := range s.Points {
					if v, ok := p.Values[m.Key]; ok {
						xs, ys = append(xs, ns[i]), append(ys, v)
					}
				}
				if len(ys) < 3 || strings.HasSuffix(m.Key, "_x") || slices.Max(ys) == slices.Min(ys) {
					continue // a ratio, or a constant: nothing to fit
				}
				g, ok := FitGrowth(xs, ys)
				if !ok {
					continue
				}
				at := "measured"
				if largest < ExtrapolateTo {
					at = formatValue(g.At(ExtrapolateTo))
				}
				fmt.Fprintf(w, "| %s | %s | a=%s b=%s | %.3f | %s |\n", m.Title, g.Model, formatValue(g.A), formatCoef(g.B), g.R2, at)
			}
			fmt.Fprintln(w)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		fmt.Fprintln(w)
	}
}

func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func formatCoef(v float64) string { return fmt.Sprintf("%.3g", v) }
