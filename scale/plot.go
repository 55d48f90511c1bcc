package scale

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Chart is one plot of the report: some metrics of one series against
// the cluster size.
type Chart struct {
	Series, File, Title, YLabel string
	Keys                        []string
	// With, when set, is a second series whose same metrics are drawn
	// beside the first, titled with its name (with and without the
	// fan-out cache).
	With string
}

// Charts are the plots docs/scale.md shows.
var Charts = []Chart{
	{"calc", "calc-heap.png", "Calculation graph heap (10,000 policies, 30 pods/node)", "MiB", []string{"heap_mb"}, ""},
	{"calc", "calc-sync.png", "Calculation graph first sync", "s", []string{"sync_s"}, ""},
	{"fanout-1m", "fanout-latency.png", "Change to all N watchers (1 etcd member)", "ms", []string{"policy_p50_ms", "policy_p99_ms", "wep_p50_ms", "wep_p99_ms"}, ""},
	{"fanout-1m", "fanout-etcd.png", "etcd bytes sent per change", "KiB", []string{"etcd_kib"}, ""},
	{"fanout-1m", "fanout-sync.png", "Cold start: all agents in sync", "s", []string{"sync_all_s"}, ""},
	{"fanout-1m", "fanout-memory.png", "etcd RSS and agent heap", "MiB / KiB", []string{"etcd_rss_mb", "agent_kib"}, ""},
	{"fanout-1m", "fanoutcache-latency.png", "Policy change to all N watchers, with and without the cache", "ms", []string{"policy_p50_ms", "policy_p99_ms"}, "fanoutcache-1m"},
	{"fanout-1m", "fanoutcache-etcd.png", "etcd CPU per change, with and without the cache", "ms", []string{"etcd_cpu_ms"}, "fanoutcache-1m"},
	{"fanout-1m", "fanoutcache-sync.png", "Cold start, with and without the cache", "s", []string{"sync_all_s", "etcd_sync_cpu_s"}, "fanoutcache-1m"},
	{"fanout-1m", "fanoutcache-memory.png", "etcd RSS, with and without the cache", "MiB", []string{"etcd_rss_mb"}, "fanoutcache-1m"},
	{"reflector", "rr-converge.png", "Route reflector convergence", "s", []string{"ours_converge_s", "bird_converge_s"}, ""},
	{"reflector", "rr-memory.png", "Route reflector RSS (converged, and peak)", "MiB", []string{"ours_rss_mb", "bird_rss_mb", "ours_peak_mb", "bird_peak_mb"}, ""},
	{"ipam", "ipam-storm.png", "IPAM start-up storm (30 addresses per node)", "s", []string{"storm_s", "node_p99_s"}, ""},
}

// WritePlots writes each chart whose series is present as a PNG in dir
// and returns the files written.
func WritePlots(dir string, series []Series) ([]string, error) {
	byName := map[string]Series{}
	for _, s := range series {
		byName[s.Name] = s
	}
	var files []string
	for _, c := range Charts {
		s, ok := byName[c.Series]
		if !ok || len(s.Points) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = c.Title
		p.X.Label.Text = "cluster size (nodes)"
		p.Y.Label.Text = c.YLabel
		args := chartLines(s, c.Keys, "")
		if c.With != "" {
			w, ok := byName[c.With]
			if !ok || len(w.Points) == 0 {
				continue
			}
			args = append(chartLines(s, c.Keys, " (no cache)"), chartLines(w, c.Keys, " (cache)")...)
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return files, fmt.Errorf("plot %s: %w", c.File, err)
		}
		p.Legend.Top, p.Legend.Left = true, true
		path := filepath.Join(dir, c.File)
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
			return files, fmt.Errorf("saving %s: %w", path, err)
		}
		files = append(files, path)
	}
	return files, nil
}

// chartLines are the plotutil arguments (title, points) of keys of s,
// each title followed by suffix.
func chartLines(s Series, keys []string, suffix string) []any {
	var args []any
	for _, k := range keys {
		xy := plotter.XYs{}
		for _, pt := range s.Points {
			if v, ok := pt.Values[k]; ok {
				xy = append(xy, plotter.XY{X: float64(pt.N), Y: v})
			}
		}
		args = append(args, metricTitle(s, k)+suffix, xy)
	}
	return args
}

func metricTitle(s Series, key string) string {
	for _, m := range s.Metrics {
		if m.Key == key {
			return m.Title
		}
	}
	return key
}
