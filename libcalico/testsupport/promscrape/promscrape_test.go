package promscrape

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const text = `# TYPE requests_total counter
requests_total{code="200",path="/a"} 7
requests_total{code="500",path="/a"} 2
# TYPE depth gauge
depth 3.5
# TYPE took_seconds histogram
took_seconds_bucket{le="1"} 4
took_seconds_bucket{le="+Inf"} 5
took_seconds_sum 2.5
took_seconds_count 5
`

func TestValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(text)) }))
	defer srv.Close()
	fams, err := Get(nil, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"requests_total", []string{"code", "500"}, 2, true},
		{"requests_total", []string{"path", "/a", "code", "200"}, 7, true},
		{"requests_total", []string{"code", "404"}, 0, false},
		{"depth", nil, 3.5, true},
		{"took_seconds", nil, 5, true},
		{"absent", nil, 0, false},
	} {
		v, ok := Value(fams, c.name, c.labels...)
		if v != c.want || ok != c.ok {
			t.Errorf("Value(%s %v) = %v, %v; want %v, %v", c.name, c.labels, v, ok, c.want, c.ok)
		}
		if f := Find(fams, c.name, c.labels...); (c.ok && f != c.want) || (!c.ok && f != -1) {
			t.Errorf("Find(%s %v) = %v", c.name, c.labels, f)
		}
	}
}

func TestGetNamesTheStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }))
	defer srv.Close()
	if _, err := Get(nil, srv.URL); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "down") {
		t.Fatalf("Get of a 503: %v", err)
	}
}
