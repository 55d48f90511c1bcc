package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	log "github.com/sirupsen/logrus"
)

// DefaultRunDir holds the agent's pid file and status socket.
const DefaultRunDir = "/var/run/calico"

// File names inside the run directory.
const (
	SocketName  = "node.sock"
	PIDFileName = "calico-node.pid"
)

// ReportPath is the HTTP path of the status report.
const ReportPath = "/status"

// Source produces the current report.
type Source func(ctx context.Context) (Report, error)

// Server serves the status report on a unix socket.
type Server struct {
	path string
	srv  *http.Server
	done chan struct{}
}

// Handler serves the report of src as JSON on ReportPath, and the policy
// endpoints of pol (nil when felix does not run).
func Handler(src Source, pol Policy) http.Handler {
	mux := http.NewServeMux()
	policyHandlers(mux, pol)
	mux.HandleFunc("GET "+ReportPath, func(w http.ResponseWriter, r *http.Request) {
		rep, err := src(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	return mux
}

// Listen serves src and pol (see Handler) on the unix socket at path (a
// stale socket left by a dead agent is replaced) until Close.
func Listen(path string, src Source, pol Policy) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("status socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale status socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket %s: %w", path, err)
	}
	s := &Server{path: path, srv: &http.Server{Handler: Handler(src, pol), ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).WithField("socket", path).Error("Status server stopped")
		}
	}()
	return s, nil
}

// Close stops the server and removes its socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	_ = os.Remove(s.path)
	return err
}

// Fetch reads the report of the agent serving the socket at path.
func Fetch(ctx context.Context, path string) (Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://calico-node"+ReportPath, nil)
	if err != nil {
		return Report{}, err
	}
	resp, err := client(path).Do(req)
	if err != nil {
		return Report{}, fmt.Errorf("reading status from %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var msg [512]byte
		n, _ := resp.Body.Read(msg[:])
		return Report{}, fmt.Errorf("reading status from %s: %s: %s", path, resp.Status, msg[:n])
	}
	var rep Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return Report{}, fmt.Errorf("reading status from %s: %w", path, err)
	}
	return rep, nil
}

// client is an HTTP client whose every connection is to the unix socket
// at path.
func client(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}
