package felix

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// livenessTimeout is how long felix's main loop may go without reporting
// before /liveness fails by default; the loop reports at least every
// heartbeat.
const (
	livenessTimeout = 90 * time.Second
	heartbeat       = 10 * time.Second
)

// Health reporter names, Calico's: the one main loop of Palisade's felix
// does the work of both, so healthTimeoutOverrides of either set its
// timeout (the larger when both are given).
const (
	reporterDataplane = "InternalDataplaneMainLoop"
	reporterCalcGraph = "CalculationGraph"
)

// health is what /liveness and /readiness say. Ready means: the
// datastore was read completely (in sync), the dataplane has been
// programmed from it since, the last apply succeeded, and the datastore
// answers. Live means the main loop reported within livenessTimeout.
// Safe for concurrent use.
type health struct {
	mu        sync.Mutex
	inSync    bool
	applied   bool
	applyErr  error
	beat      time.Time
	datastore func() error
	// timeout is how long the loop may go without reporting (0: no
	// limit), from healthTimeoutOverrides.
	timeout time.Duration
}

// newHealth starts not ready, and live (the loop has just started).
func newHealth(datastore func() error) *health {
	return &health{beat: time.Now(), datastore: datastore, timeout: livenessTimeout}
}

// restart is a new main loop: not in sync, nothing programmed.
func (h *health) restart() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inSync, h.applied, h.applyErr, h.beat = false, false, nil, time.Now()
}

func (h *health) syncDone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inSync = true
	h.beat = time.Now()
}

// applyDone records an apply's outcome; programmed says the dataplane is
// in sync with what the datastore said (not only tried).
func (h *health) applyDone(err error, programmed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applyErr = err
	if err == nil && programmed {
		h.applied = true
	}
	h.beat = time.Now()
}

func (h *health) alive() {
	h.mu.Lock()
	h.beat = time.Now()
	h.mu.Unlock()
}

// live is nil when felix is live, else why not.
func (h *health) live(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d := now.Sub(h.beat); h.timeout > 0 && d > h.timeout {
		return fmt.Errorf("felix's main loop has not reported for %s", d.Round(time.Second))
	}
	return nil
}

// setTimeouts follows healthTimeoutOverrides (as Calico's: a timeout of 0
// turns the check off); names of reporters felix does not have are warned
// about and otherwise ignored.
func (h *health) setTimeouts(overrides []v3.HealthTimeoutOverride, logger *log.Entry) {
	t, set := time.Duration(0), false
	for _, o := range overrides {
		switch o.Name {
		case reporterDataplane, reporterCalcGraph:
			t, set = max(t, o.Timeout.Duration), true
		default:
			logger.WithFields(log.Fields{"name": o.Name, "reporters": []string{reporterDataplane, reporterCalcGraph}}).
				Warn("healthTimeoutOverrides names no health reporter of felix: ignored")
		}
	}
	if !set {
		t = livenessTimeout
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t != h.timeout {
		logger.WithFields(log.Fields{"reporters": []string{reporterDataplane, reporterCalcGraph}, "timeout": t}).Info("Liveness timeout of felix's main loop")
	}
	h.timeout = t
}

// ready is nil when felix is ready, else why not.
func (h *health) ready(now time.Time) error {
	if err := h.live(now); err != nil {
		return err
	}
	h.mu.Lock()
	inSync, applied, applyErr := h.inSync, h.applied, h.applyErr
	h.mu.Unlock()
	if h.datastore != nil {
		if err := h.datastore(); err != nil {
			return fmt.Errorf("the datastore does not answer: %w", err)
		}
	}
	switch {
	case !inSync:
		return errors.New("not in sync with the datastore yet")
	case !applied:
		return errors.New("the dataplane is not programmed yet")
	case applyErr != nil:
		return fmt.Errorf("the last dataplane apply failed: %w", applyErr)
	}
	return nil
}

// handler serves /liveness and /readiness as Calico's felix does: 200
// when good, 503 when not, with a one-line reason as the body.
func (h *health) handler() http.Handler {
	mux := http.NewServeMux()
	answer := func(what string, check func(time.Time) error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := check(time.Now()); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "felix is not %s: %v\n", what, err)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.Handle("/liveness", answer("live", h.live))
	mux.Handle("/readiness", answer("ready", h.ready))
	return mux
}

// Datastore probe of a felix run without DatastoreHealth: one read a
// second, each given probeTimeout.
const (
	probeInterval = time.Second
	probeTimeout  = 3 * time.Second
)

// dsProbe reads ClusterInformation "default" once a second; absent is an
// answer too.
type dsProbe struct {
	mu  sync.Mutex
	err error
}

func (p *dsProbe) result() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *dsProbe) run(ctx context.Context, store datastore.Interface) {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err := store.Get(pctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, datastore.ErrNotFound) {
			err = nil
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
