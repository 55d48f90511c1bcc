package agent

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestProbeFlags: only argument lists made of probe flags are probes;
// -felix-ready asks FELIX_HEALTHHOST:FELIX_HEALTHPORT and prints one line
// with felix's own reason, exiting 1 when not ready and 0 when ready; a
// health endpoint that does not answer is named.
func TestProbeFlags(t *testing.T) {
	for _, args := range [][]string{nil, {"--name", "n1"}, {"felix-ready"}, {"-felix-ready", "--log-level=debug"}, {"version"}} {
		if handled, _ := Probe(args, func(string) string { return "" }, &bytes.Buffer{}); handled {
			t.Errorf("%q taken for probe flags", args)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readiness" && !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("felix is not ready: not in sync with the datastore yet\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	env := map[string]string{"FELIX_HEALTHHOST": "127.0.0.1", "FELIX_HEALTHPORT": port}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		handled, code := Probe(args, func(k string) string { return env[k] }, &out)
		if !handled {
			t.Fatalf("%q not taken for probe flags", args)
		}
		if strings.Count(out.String(), "\n") != 1 {
			t.Errorf("%q printed %q, want one line", args, out.String())
		}
		return code, strings.TrimSpace(out.String())
	}
	if code, line := run("-felix-live", "--felix-ready"); code != 1 || line != "felix-ready: felix is not ready: not in sync with the datastore yet" {
		t.Errorf("not ready: exit %d %q", code, line)
	}
	ready = true
	if code, line := run("-felix-live", "-felix-ready"); code != 0 || line != "felix-live, felix-ready: ok" {
		t.Errorf("ready: exit %d %q", code, line)
	}
	l.Close()
	srv.Close()
	if code, line := run("-felix-live"); code != 1 || !strings.Contains(line, "health endpoint does not answer") {
		t.Errorf("nothing listening: exit %d %q", code, line)
	}
	env["CALICO_RUN_DIR"] = t.TempDir()
	if code, line := run("-bird-ready"); code != 1 || !strings.Contains(line, "calico-node does not answer") {
		t.Errorf("no agent: exit %d %q", code, line)
	}
}
