// Package felix runs the policy engine of one node: the syncer reads the
// datastore, the calculation graph works out what the node must enforce,
// and the iptables or the eBPF dataplane (FelixConfiguration bpfEnabled)
// writes it into the node's network namespace.
package felix

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/vxlan"
	"github.com/palisade-net/palisade/felix/metrics"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/endpointstatus"
	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
)

// EndpointStatusDir is the directory, under calico-node's run directory
// (/var/run/calico), of the endpoint status files: one file per programmed
// WorkloadEndpoint, named dataplane.StatusFileName(namespace, name) and
// holding a dataplane.EndpointStatus in JSON. The CNI plugin may wait for
// its pod's file before returning from ADD.
const EndpointStatusDir = endpointstatus.DirName

// Config configures one felix.
type Config struct {
	// NodeName is the node whose endpoints felix programs.
	NodeName string
	// Store is the datastore.
	Store datastore.Interface
	// KV is the raw key-value view of Store: with it (and a Store that
	// can watch raw keys) felix reads the IPAM blocks and programs the
	// VXLAN overlay's routes to other nodes' blocks.
	KV datastore.KV
	// MTUFile receives the pod MTU for the CNI plugin ("" writes none;
	// calico-node: /var/lib/calico/mtu).
	MTUFile string
	// OverlayBlackholes makes felix blackhole this node's blocks of VXLAN
	// pools (protocol 80), for a node without a BGP speaker doing so.
	OverlayBlackholes bool
	// NetNS is the path of the network namespace to program ("" for the
	// current one, as in calico-node).
	NetNS string
	// StatusDir receives one file per programmed workload endpoint (see
	// dataplane.EndpointStatus); "" writes none.
	StatusDir string
	// Log is where felix logs (logrus' standard logger when nil): felix
	// writes to its output, with its formatter, hooks and fields, but
	// through a logger of its own whose level is FelixConfiguration's
	// logSeverityScreen.
	Log *log.Entry
	// Applied, when set, is called after every successful dataplane
	// apply (for tests and benchmarks).
	Applied func()
	// Inspector, when set, is served by felix's main loop (explanations
	// and rule counters).
	Inspector *Inspector
	// Environ is the environment (os.Environ's form) whose FELIX_<NAME>
	// variables set FelixConfiguration fields over the datastore's, and
	// ConfigFile felix's configuration file ("" for none; calico-node:
	// DefaultConfigFile), below the environment: see LocalConfig.
	Environ    []string
	ConfigFile string
	// DatastoreHealth, when set, says whether the datastore answers (nil
	// when it does), for /readiness; when nil felix reads the datastore
	// once a second itself.
	DatastoreHealth func() error
	// EndpointSlices, when set, feeds the Kubernetes EndpointSlices
	// (calico-node: kubeslices.Source) for rules that name a Service;
	// without it such rules fail closed.
	EndpointSlices UpdateSource
}

// UpdateSource is a source of calculation-graph updates beside the
// datastore's syncer. Run sends until ctx ends.
type UpdateSource interface {
	Run(ctx context.Context, out func([]calc.Update))
}

// Retry bounds after a failed dataplane apply.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = 5 * time.Second
	// routeRetry is the pause before writing a route again whose
	// interface was not up.
	routeRetry = 20 * time.Millisecond
)

// served is felix's state that outlives a restart of the main loop: the
// health and metrics endpoints and the instruments.
type served struct {
	health  *health
	healthE *libmetrics.Endpoint
	metricE *libmetrics.Endpoint
	debugE  *libmetrics.Endpoint
	extra   prometheus.Collector
	// rules are the per-rule counters (felix_policy_rule_*).
	rules prometheus.Collector
	// metrics is nil while prometheusMetricsEnabled was never on; read
	// by the syncer's goroutines and the metrics endpoint.
	metrics atomic.Pointer[felixMetrics]
}

// felixMetrics is one set of instruments and its /metrics handler.
type felixMetrics struct {
	m       *metrics.Felix
	opts    serving
	handler http.Handler
}

func (s *served) instruments() *metrics.Felix {
	if fm := s.metrics.Load(); fm != nil {
		return fm.m
	}
	return nil
}

// serveMetrics answers /metrics from the current instruments.
func (s *served) serveMetrics(w http.ResponseWriter, r *http.Request) {
	fm := s.metrics.Load()
	if fm == nil {
		http.Error(w, "metrics are off", http.StatusServiceUnavailable)
		return
	}
	fm.handler.ServeHTTP(w, r)
}

// configure follows the configuration's health and metrics settings. It
// reports whether the dataplane must be made again (metrics were turned on,
// or their collectors changed: the dataplane counts into the instruments
// it was made with).
func (s *served) configure(cfg *calc.Config) (remake bool) {
	want := servingOf(cfg.Spec)
	_ = s.healthE.Set(want.HealthAddr)
	if want.MetricsAddr != "" {
		fm := s.metrics.Load()
		if fm == nil || fm.opts.GoMetrics != want.GoMetrics || fm.opts.ProcessMetrics != want.ProcessMetrics {
			m := metrics.New(metrics.Options{Go: want.GoMetrics, Process: want.ProcessMetrics, Extra: []prometheus.Collector{s.extra, s.rules}})
			s.metrics.Store(&felixMetrics{m: m, opts: want, handler: promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})})
			remake = true
		}
	}
	_ = s.metricE.Set(want.MetricsAddr)
	_ = s.debugE.Set(want.DebugAddr)
	return remake
}

// event is what the syncer hands the main loop.
type event struct {
	updates []calc.Update
	inSync  bool
}

// forwarder turns the syncer's callbacks into events for the main loop,
// which owns the graph.
type forwarder struct {
	ctx context.Context
	c   chan<- event
	srv *served
}

// OnResync implements calc.ResyncObserver.
func (f forwarder) OnResync(string) { f.srv.instruments().Resync() }

func (f forwarder) OnUpdates(u []calc.Update) {
	select {
	case f.c <- event{updates: u}:
	case <-f.ctx.Done():
	}
}

func (f forwarder) OnInSync() {
	select {
	case f.c <- event{inSync: true}:
	case <-f.ctx.Done():
	}
}

// Run runs felix until ctx ends, then returns nil. Kernel state is left in
// place on return (a restarted felix takes it over and repairs it).
func Run(ctx context.Context, cfg Config) error {
	if cfg.NodeName == "" || cfg.Store == nil {
		return errors.New("felix: NodeName and Store are required")
	}
	base := cfg.Log
	if base == nil {
		base = log.NewEntry(log.StandardLogger())
	}
	own := ownLogger(base.Logger)
	logger := log.NewEntry(own).WithFields(base.Data).WithFields(log.Fields{"part": "felix", "node": cfg.NodeName})
	local, err := ReadLocalConfig(cfg.Environ, cfg.ConfigFile)
	if err != nil {
		return fmt.Errorf("felix: %w", err)
	}
	if len(local.Set) > 0 {
		logger.WithField("set", local.Set).Info("Configuration from the environment and the config file wins over the datastore's")
	}
	if len(local.Unknown) > 0 {
		logger.WithField("unknown", local.Unknown).Warn("Ignoring FELIX_ variables and config file keys that are not FelixConfiguration parameters")
	}
	dsHealth := cfg.DatastoreHealth
	if dsHealth == nil {
		p := &dsProbe{}
		go p.run(ctx, cfg.Store)
		dsHealth = p.result
	}
	if cfg.Inspector == nil {
		// The per-rule metrics read the counters through one.
		cfg.Inspector = NewInspector()
	}
	srv := &served{health: newHealth(dsHealth),
		extra: libmetrics.NewBadValues(datastore.BadValuesOf(cfg.Store)),
		rules: metrics.NewRuleCounters(cfg.Inspector, logger)}
	srv.healthE = libmetrics.NewEndpoint("health", srv.health.handler(), logger)
	srv.metricE = libmetrics.NewEndpoint("metrics", http.HandlerFunc(srv.serveMetrics), logger)
	srv.debugE = libmetrics.NewEndpoint("debug", profiles(), logger)
	defer srv.healthE.Close()
	defer srv.metricE.Close()
	defer srv.debugE.Close()
	for {
		restart, err := runOnce(ctx, cfg, local, logger, own, srv)
		if !restart || err != nil || ctx.Err() != nil {
			return err
		}
		logger.Info("bpfEnabled, the metrics settings or the eBPF object needed changed: starting again with a new dataplane")
	}
}

// runOnce runs the syncer, the graph and one dataplane until ctx ends
// (false) or FelixConfiguration bpfEnabled asks for the other dataplane
// (true).
func runOnce(ctx context.Context, cfg Config, local *LocalConfig, logger *log.Entry, own *log.Logger, srv *served) (bool, error) {
	dp := &dataplaneSwitch{conf: dataplane.Config{NetNS: cfg.NetNS, StatusDir: cfg.StatusDir, Log: logger}, log: logger, logger: own, srv: srv}
	defer dp.Close()
	run, err := nsexec.New(cfg.NetNS)
	if err != nil {
		return false, fmt.Errorf("felix: %w", err)
	}
	defer run.Close()
	ov, err := vxlan.New(run, logger, cfg.MTUFile)
	if err != nil {
		return false, fmt.Errorf("felix: %w", err)
	}
	defer ov.Close()
	ov.Blackholes = cfg.OverlayBlackholes
	dp.overlay = ov
	graph := calc.NewGraph(cfg.NodeName, dp)
	graph.SetLocalConfig(&local.Spec)
	srv.health.restart()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan event, 64)
	syncDone := make(chan error, 1)
	syncer := calc.NewSyncer(cfg.Store, cfg.NodeName, forwarder{ctx: ctx, c: events, srv: srv})
	if w, ok := cfg.Store.(datastore.KVWatcher); ok && cfg.KV != nil {
		syncer.Blocks = &calc.BlockSource{KV: cfg.KV, Watcher: w}
	}
	go func() { syncDone <- syncer.Run(ctx) }()
	defer func() { cancel(); <-syncDone }()
	if cfg.EndpointSlices != nil {
		slicesDone := make(chan struct{})
		fw := forwarder{ctx: ctx, c: events, srv: srv}
		go func() { defer close(slicesDone); cfg.EndpointSlices.Run(ctx, fw.OnUpdates) }()
		defer func() { cancel(); <-slicesDone }()
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// idle fires once the loop has waited idleGCDelay after an apply.
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	gc := newIdleCollector()
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	retry := time.Duration(0)
	var inspect chan func(*calc.Graph, *dataplaneSwitch)
	if cfg.Inspector != nil {
		inspect = cfg.Inspector.reqs
	}
	// The graph is flushed only once the datastore was read completely:
	// the dataplane is chosen from the first configuration it is given.
	inSync := false
	handle := func(ev event) {
		if ev.inSync {
			graph.OnInSync()
			inSync = true
			srv.health.syncDone()
			return
		}
		if m := dp.conf.Metrics; m != nil {
			start := time.Now()
			graph.OnUpdates(ev.updates)
			m.GraphUpdated(len(ev.updates), time.Since(start))
			return
		}
		graph.OnUpdates(ev.updates)
	}
	for {
		select {
		case <-ctx.Done():
			logger.Info("felix stopping")
			return false, nil
		case ev := <-events:
			handle(ev)
			// Take whatever else is queued, so one apply covers it.
		drain:
			for {
				select {
				case ev := <-events:
					handle(ev)
				default:
					break drain
				}
			}
			if !inSync {
				continue
			}
			graph.Flush()
			if dp.switching() {
				return true, nil
			}
		case <-dp.wake():
		case <-timer.C:
		case fn := <-inspect:
			fn(graph, dp)
			continue
		case <-idle.C:
			if dp.awaitingEndpoints(time.Now()) {
				// A pod's endpoint is expected within milliseconds: a
				// collection started now would still be marking then.
				idle.Reset(idleGCDelay)
				continue
			}
			if gc.collectIfDue() {
				logger.Debug("Collecting garbage while idle")
			}
			continue
		case <-beat.C:
			srv.health.alive()
			continue
		}
		applyStart := time.Now()
		err := dp.Apply(ctx)
		if dp.InSync() {
			err = errors.Join(err, ov.Apply(ctx))
		}
		if inSync && ctx.Err() == nil {
			srv.health.applyDone(err, err == nil && dp.InSync())
			if m := dp.conf.Metrics; m != nil {
				m.Applied(time.Since(applyStart), err)
				dp.report(m)
				m.State(true, srv.health.ready(time.Now()) == nil)
			}
		}
		wait := min(dp.NextRefresh(time.Now()), ov.NextRefresh(time.Now()))
		switch {
		case err != nil && ctx.Err() == nil:
			retry = min(max(retry*2, minRetry), maxRetry)
			logger.WithError(err).WithField("retryIn", retry).Warn("Dataplane apply failed")
			wait = min(wait, retry)
		case err == nil:
			retry = 0
			if dp.Pending() {
				wait = min(wait, routeRetry)
			}
			if cfg.Applied != nil && dp.InSync() {
				cfg.Applied()
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(wait, time.Millisecond))
		idle.Reset(idleGCDelay)
	}
}
