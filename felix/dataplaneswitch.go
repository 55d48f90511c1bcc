package felix

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	bpfdp "github.com/palisade-net/palisade/felix/dataplane/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/vxlan"
	"github.com/palisade-net/palisade/libcalico/goruntime"
)

// driver is what the main loop needs of a dataplane: the iptables one
// (felix/dataplane) or the eBPF one (felix/dataplane/bpf).
type driver interface {
	calc.Dataplane
	Apply(ctx context.Context) error
	NextRefresh(now time.Time) time.Duration
	Pending() bool
	InSync() bool
	Close()
}

// dataplaneSwitch is the dataplane the calculation graph feeds. It owns
// felix's configuration (each FelixConfiguration sets felix's log level,
// names the fields felix does not act on, configures the VXLAN overlay
// and the health and metrics endpoints: config.go) and the switch between
// the two drivers: it makes the driver that FelixConfiguration bpfEnabled
// asks for at the first configuration (the main loop flushes the graph
// only once it is in sync, so that is the datastore's), and when
// bpfEnabled changes it asks the main loop to start again with the other
// one. Each driver removes what the other left: the eBPF one writes
// felix's iptables down to what it keeps there, and the iptables one,
// after its first complete write, detaches and unpins the programs and
// maps of package bpf. The graph's other updates go to the driver
// (forward.go), counted for the metrics (active.go).
type dataplaneSwitch struct {
	conf dataplane.Config
	log  *log.Entry
	// logger is felix's own logger, whose level follows logSeverityScreen.
	logger *log.Logger
	unused unusedFields
	// goRuntime follows goGCThreshold, goMemoryLimitMB and goMaxProcs.
	goRuntime goruntime.Applier
	overlay   *vxlan.Manager
	srv       *served

	d       driver
	bpf     bool
	restart bool
	// cleaned: the iptables driver removed the eBPF leftovers.
	cleaned bool
	// active counts what the driver was given, for the metrics (kept
	// only while conf.Metrics is set).
	active activeCounts
}

func (s *dataplaneSwitch) make(bpf bool) error {
	var err error
	if bpf {
		s.d, err = bpfdp.New(bpfdp.Config{NetNS: s.conf.NetNS, StatusDir: s.conf.StatusDir, Log: s.conf.Log, Metrics: s.conf.Metrics})
	} else {
		s.d, err = dataplane.New(s.conf)
	}
	s.bpf = bpf
	return err
}

func bpfEnabled(cfg *calc.Config) bool { return cfg.Spec.BPFEnabled != nil && *cfg.Spec.BPFEnabled }

// selectDriver makes the driver at the first configuration and asks for a
// restart when bpfEnabled changes; the driver then takes the
// configuration.
func (s *dataplaneSwitch) selectDriver(cfg *calc.Config) {
	if s.d == nil {
		if err := s.make(bpfEnabled(cfg)); err != nil {
			s.log.WithError(err).Error("Dataplane not started")
			s.d = nil
			s.restart = true
			return
		}
		s.log.WithField("bpfEnabled", s.bpf).Info("Dataplane selected")
	} else if bpfEnabled(cfg) != s.bpf {
		s.restart = true
	}
	s.d.OnConfigUpdate(cfg)
	if r, ok := s.d.(interface{ NeedsRestart() bool }); ok && r.NeedsRestart() {
		s.log.Info("featureDetectOverride asks for the policy engine, which the programs loaded lack: starting again")
		s.restart = true
	}
}

// switching reports whether the main loop must start again (bpfEnabled
// changed, the eBPF programs loaded lack the policy engine now asked
// for, or the dataplane could not start).
func (s *dataplaneSwitch) switching() bool { return s.restart }

// Apply applies the driver, and once the iptables driver has written
// everything, removes what the eBPF dataplane left.
func (s *dataplaneSwitch) Apply(ctx context.Context) error {
	if s.d == nil || s.restart {
		return nil
	}
	err := s.d.Apply(ctx)
	if err == nil && !s.bpf && !s.cleaned && s.d.InSync() {
		run, rerr := nsexec.New(s.conf.NetNS)
		if rerr == nil {
			rerr = palbpf.RemoveAll("", run)
			run.Close()
		}
		if rerr != nil {
			return rerr
		}
		s.cleaned = true
	}
	return err
}

// awaitingEndpoints reports whether the driver expects a pod's endpoint
// soon (a workload interface appeared a moment ago, not programmed yet):
// the loop then does not collect garbage while idle.
func (s *dataplaneSwitch) awaitingEndpoints(now time.Time) bool {
	w, ok := s.d.(interface{ AwaitingEndpoints(time.Time) bool })
	return ok && w.AwaitingEndpoints(now)
}

// wake fires when the driver wants an apply outside the loop's timers.
func (s *dataplaneSwitch) wake() <-chan struct{} {
	if w, ok := s.d.(interface{ Wake() <-chan struct{} }); ok {
		return w.Wake()
	}
	return nil
}

func (s *dataplaneSwitch) NextRefresh(now time.Time) time.Duration {
	if s.d == nil {
		return time.Minute
	}
	return s.d.NextRefresh(now)
}

func (s *dataplaneSwitch) Pending() bool { return s.d != nil && s.d.Pending() }
func (s *dataplaneSwitch) InSync() bool  { return s.d != nil && s.d.InSync() }

func (s *dataplaneSwitch) Close() {
	if s.d != nil {
		s.d.Close()
	}
}
