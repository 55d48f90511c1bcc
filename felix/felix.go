// Package felix runs the policy engine of one node: the syncer reads the
// datastore, the calculation graph works out what the node must enforce,
// and the iptables or the eBPF dataplane (FelixConfiguration bpfEnabled)
// writes it into the node's network namespace.
package felix

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/endpointstatus"
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
}

// Retry bounds after a failed dataplane apply.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = 5 * time.Second
	// routeRetry is the pause before writing a route again whose
	// interface was not up.
	routeRetry = 20 * time.Millisecond
)

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
}

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
	for {
		restart, err := runOnce(ctx, cfg, logger, own)
		if !restart || err != nil || ctx.Err() != nil {
			return err
		}
		logger.Info("bpfEnabled changed: starting again with the other dataplane")
	}
}

// runOnce runs the syncer, the graph and one dataplane until ctx ends
// (false) or FelixConfiguration bpfEnabled asks for the other dataplane
// (true).
func runOnce(ctx context.Context, cfg Config, logger *log.Entry, own *log.Logger) (bool, error) {
	dp := &selector{conf: dataplane.Config{NetNS: cfg.NetNS, StatusDir: cfg.StatusDir, Log: logger}, log: logger}
	defer dp.Close()
	graph := calc.NewGraph(cfg.NodeName, &levelSetter{selector: dp, logger: own, log: logger})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan event, 64)
	syncDone := make(chan error, 1)
	go func() {
		syncDone <- calc.NewSyncer(cfg.Store, cfg.NodeName, forwarder{ctx: ctx, c: events}).Run(ctx)
	}()
	defer func() { cancel(); <-syncDone }()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// idle fires once the loop has waited idleGCDelay after an apply.
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	gc := newIdleCollector()
	retry := time.Duration(0)
	var inspect chan func(*calc.Graph, *selector)
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
			if gc.collectIfDue() {
				logger.Debug("Collecting garbage while idle")
			}
			continue
		}
		err := dp.Apply(ctx)
		wait := dp.NextRefresh(time.Now())
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

// ownLogger is a logger writing where base writes, in the same format and
// through the same hooks, with a level of its own. Each entry is one Write
// to the shared output, as with base itself.
func ownLogger(base *log.Logger) *log.Logger {
	return &log.Logger{
		Out: base.Out, Formatter: base.Formatter, Hooks: base.Hooks, ReportCaller: base.ReportCaller,
		ExitFunc: base.ExitFunc, Level: base.GetLevel(),
	}
}

// levelSetter is the dataplane as the calculation graph sees it: every
// configuration first sets felix's log level from logSeverityScreen and
// names the fields felix does not act on.
type levelSetter struct {
	*selector
	logger *log.Logger
	log    *log.Entry
	unused unusedFields
}

// OnConfigUpdate implements calc.Dataplane.
func (l *levelSetter) OnConfigUpdate(cfg *calc.Config) {
	level, err := screenLevel(cfg.LogSeverityScreen)
	if err != nil {
		l.log.WithError(err).Warn("Ignoring logSeverityScreen")
	} else if level != l.logger.GetLevel() {
		l.logger.SetLevel(level)
		l.log.WithField("logSeverityScreen", cfg.LogSeverityScreen).Info("Log level changed")
	}
	l.unused.warn(cfg, l.log)
	l.selector.OnConfigUpdate(cfg)
}

// unusedFields warns about the FelixConfiguration fields that are set but
// not acted on: once, and again when the list changes.
type unusedFields struct{ last string }

func (u *unusedFields) warn(cfg *calc.Config, logger *log.Entry) {
	fields := cfg.NotActedOn()
	list := strings.Join(fields, ", ")
	if list == u.last {
		return
	}
	u.last = list
	if list != "" {
		logger.WithField("fields", list).Warn("FelixConfiguration fields accepted but not acted on by Palisade's felix")
	}
}

// screenLevel maps Calico's severities (Debug, Info, Warning, Error,
// Fatal; any case) to logrus levels.
func screenLevel(severity string) (log.Level, error) {
	switch strings.ToLower(severity) {
	case "debug":
		return log.DebugLevel, nil
	case "info":
		return log.InfoLevel, nil
	case "warning":
		return log.WarnLevel, nil
	case "error":
		return log.ErrorLevel, nil
	case "fatal":
		return log.FatalLevel, nil
	}
	return 0, fmt.Errorf("unknown log severity %q (want Debug, Info, Warning, Error or Fatal)", severity)
}
