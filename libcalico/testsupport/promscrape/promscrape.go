// Package promscrape fetches and reads a Prometheus /metrics answer in
// tests: the families it holds, and the value of one series.
package promscrape

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Get fetches url with c (nil for http.DefaultClient) and parses the
// answer; a status other than 200 is an error naming it and the body.
func Get(c *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return Parse(string(body))
}

// Parse reads the text exposition format.
func Parse(text string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}

// Value is the value of the first series of family name whose labels
// include the given name, value pairs: a counter's, a gauge's, an
// untyped one's, or a histogram's sample count. ok is false when there
// is no such series.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Find is Value, or -1 when there is no such series (no counter, gauge
// or count the tests read goes negative).
func Find(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	if v, ok := Value(fams, name, labels...); ok {
		return v
	}
	return -1
}
