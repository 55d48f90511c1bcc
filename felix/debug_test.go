package felix

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProfiles: the debugPort server answers pprof's index and a heap
// profile, as `go tool pprof http://localhost:PORT/debug/pprof/heap` asks.
func TestProfiles(t *testing.T) {
	srv := httptest.NewServer(profiles())
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/":             "heap",
		"/debug/pprof/heap?debug=1": "heap profile:",
	} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, no %q in %.200s", path, resp.StatusCode, want, body)
		}
	}
}
