package scale

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// seriesOrder is the order the report shows the series in.
var seriesOrder = []string{"calc", "fanout-1m", "fanoutcache-1m", "fanout-3m", "reflector", "mesh", "bgp-reads", "ipam"}

// SaveSeries writes each series as dir/<name>.json, replacing the one of
// an earlier run, and returns every series dir holds, in report order.
func SaveSeries(dir string, series []Series) ([]Series, error) {
	for _, s := range series {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding series %s: %w", s.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name+".json"), append(b, '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("saving series %s: %w", s.Name, err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var all []Series
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s Series
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		all = append(all, s)
	}
	rank := func(s Series) int {
		if i := slices.Index(seriesOrder, s.Name); i >= 0 {
			return i
		}
		return len(seriesOrder)
	}
	slices.SortStableFunc(all, func(a, b Series) int { return rank(a) - rank(b) })
	return all, nil
}
