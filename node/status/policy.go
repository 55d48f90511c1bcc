package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// HTTP paths of the policy endpoints: an explanation of a packet
// (POST a calc.Query, get a calc.Explanation) and the per-rule counters
// (GET a list of calc.RuleCounter).
const (
	ExplainPath   = "/policy/explain"
	RuleStatsPath = "/policy/stats"
)

// Policy answers the policy endpoints from the agent's live felix. Explain
// returns an error wrapping calc.ErrBadQuery for a bad question.
type Policy interface {
	Explain(ctx context.Context, q calc.Query) (*calc.Explanation, error)
	RuleCounters(ctx context.Context) ([]calc.RuleCounter, error)
}

// ErrNoPolicy is what the endpoints answer when felix does not run.
var ErrNoPolicy = errors.New("felix does not run in this calico-node, so it has no policy to explain or count")

// policyHandlers adds the policy endpoints to mux; p nil answers
// ErrNoPolicy.
func policyHandlers(mux *http.ServeMux, p Policy) {
	mux.HandleFunc("POST "+ExplainPath, func(w http.ResponseWriter, r *http.Request) {
		if p == nil {
			http.Error(w, ErrNoPolicy.Error(), http.StatusServiceUnavailable)
			return
		}
		var q calc.Query
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&q); err != nil {
			http.Error(w, "reading the query: "+err.Error(), http.StatusBadRequest)
			return
		}
		x, err := p.Explain(r.Context(), q)
		writeJSON(w, x, err)
	})
	mux.HandleFunc("GET "+RuleStatsPath, func(w http.ResponseWriter, r *http.Request) {
		if p == nil {
			http.Error(w, ErrNoPolicy.Error(), http.StatusServiceUnavailable)
			return
		}
		cs, err := p.RuleCounters(r.Context())
		writeJSON(w, cs, err)
	})
}

func writeJSON(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, calc.ErrBadQuery):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, calc.ErrNoCounters):
		http.Error(w, err.Error(), http.StatusNotImplemented)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

// Explain asks the agent serving the socket at path to explain q from its
// live state. A bad query comes back as an error wrapping
// calc.ErrBadQuery.
func Explain(ctx context.Context, path string, q calc.Query) (*calc.Explanation, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	var x calc.Explanation
	if err := call(ctx, path, http.MethodPost, ExplainPath, body, &x); err != nil {
		return nil, err
	}
	return &x, nil
}

// RuleStats reads the per-rule counters of the agent serving the socket
// at path.
func RuleStats(ctx context.Context, path string) ([]calc.RuleCounter, error) {
	var cs []calc.RuleCounter
	if err := call(ctx, path, http.MethodGet, RuleStatsPath, nil, &cs); err != nil {
		return nil, err
	}
	return cs, nil
}

func call(ctx context.Context, path, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://calico-node"+url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client(path).Do(req)
	if err != nil {
		return fmt.Errorf("asking calico-node on %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		text := string(bytes.TrimSpace(msg))
		switch resp.StatusCode {
		case http.StatusBadRequest:
			return fmt.Errorf("%w: %s", calc.ErrBadQuery, trimBadQuery(text))
		case http.StatusNotImplemented:
			return fmt.Errorf("calico-node on %s: %w", path, noCounters(text))
		}
		return fmt.Errorf("calico-node on %s: %s: %s", path, resp.Status, text)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading calico-node's answer on %s: %w", path, err)
	}
	return nil
}

// noCounters is the server's ErrNoCounters text as an error wrapping it.
func noCounters(text string) error {
	if rest, ok := strings.CutPrefix(text, calc.ErrNoCounters.Error()+": "); ok {
		return fmt.Errorf("%w: %s", calc.ErrNoCounters, rest)
	}
	return fmt.Errorf("%w: %s", calc.ErrNoCounters, text)
}

// trimBadQuery drops the "bad query: " the server's error already has.
func trimBadQuery(s string) string {
	prefix := calc.ErrBadQuery.Error() + ": "
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}
