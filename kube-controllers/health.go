package kubecontrollers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"
)

// Health is what /liveness and /readiness report. Ready means the API
// server and etcd answer and, on the leader, every controller finished
// its first sync; a standby replica is ready (to take over) once it sees
// another replica lead. Until the election has a leader, none is ready.
type Health struct {
	mu          sync.Mutex
	apiserver   error
	etcd        error
	leader      bool
	standby     bool
	controllers map[string]controllerHealth
	fatal       error
	reg         *prometheus.Registry
	readyGauge  prometheus.Gauge
	leaderGauge prometheus.Gauge
	writes      *prometheus.GaugeVec
	queues      *queueMetrics
	reclaimed   *prometheus.CounterVec
	lbAllocated prometheus.Gauge
}

type controllerHealth struct {
	Synced bool   `json:"synced"`
	Error  string `json:"error,omitempty"`
}

// healthReport is the JSON body of both endpoints.
type healthReport struct {
	Live        bool                        `json:"live"`
	Ready       bool                        `json:"ready"`
	Leader      bool                        `json:"leader"`
	APIServer   string                      `json:"apiserver"`
	Etcd        string                      `json:"etcd"`
	Controllers map[string]controllerHealth `json:"controllers,omitempty"`
	Error       string                      `json:"error,omitempty"`
}

func newHealth() *Health {
	h := &Health{apiserver: errors.New("not checked yet"), etcd: errors.New("not connected yet"),
		controllers: map[string]controllerHealth{}, reg: prometheus.NewRegistry()}
	h.readyGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_kube_controllers_ready", Help: "1 when ready"})
	h.leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "calico_kube_controllers_is_leader", Help: "1 on the elected leader"})
	h.writes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_kube_controllers_datastore_writes",
		Help: "Writes made to etcd by each controller since it started"}, []string{"controller"})
	h.reclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ipam_allocations_gc_reclamations",
		Help: "Count of Calico IP allocations that have been reclaimed by the GC."}, []string{"ippool", "node"})
	h.lbAllocated = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ipam_loadbalancer_allocations",
		Help: "Number of LoadBalancer Service addresses the loadbalancer controller holds in IPAM (on the leader)."})
	h.queues = newQueueMetrics()
	h.reg.MustRegister(h.readyGauge, h.leaderGauge, h.writes, h.reclaimed, h.lbAllocated)
	h.queues.register(h.reg)
	return h
}

func (h *Health) report() healthReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := healthReport{Live: h.fatal == nil, Leader: h.leader, APIServer: "ok", Etcd: "ok", Controllers: map[string]controllerHealth{}}
	if h.apiserver != nil {
		r.APIServer = h.apiserver.Error()
	}
	if h.etcd != nil {
		r.Etcd = h.etcd.Error()
	}
	if h.fatal != nil {
		r.Error = h.fatal.Error()
	}
	synced := len(h.controllers) > 0
	for name, c := range h.controllers {
		r.Controllers[name] = c
		synced = synced && c.Synced
	}
	r.Ready = r.Live && h.apiserver == nil && h.etcd == nil && (h.leader && synced || !h.leader && h.standby)
	if r.Ready {
		h.readyGauge.Set(1)
	} else {
		h.readyGauge.Set(0)
	}
	return r
}

// isLeader says whether this replica leads (runs the controllers).
func (h *Health) isLeader() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leader
}

func (h *Health) set(fn func(h *Health)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(h)
}

// serve answers /liveness, /readiness and /metrics on port until ctx
// ends; it returns the address it listens on.
func (h *Health) serve(ctx context.Context, port int) (net.Addr, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("health server on port %d: %w", port, err)
	}
	mux := http.NewServeMux()
	answer := func(ok func(healthReport) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			r := h.report()
			w.Header().Set("Content-Type", "application/json")
			if !ok(r) {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_ = json.NewEncoder(w).Encode(r)
		}
	}
	mux.Handle("/liveness", answer(func(r healthReport) bool { return r.Live }))
	mux.Handle("/readiness", answer(func(r healthReport) bool { return r.Ready }))
	mux.Handle("/metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("Health server stopped")
		}
	}()
	return l.Addr(), nil
}
