package felix

import (
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/goruntime"
)

// OnConfigUpdate implements calc.Dataplane: every configuration first
// sets felix's log level from logSeverityScreen, names the fields felix
// does not act on, sets the Go runtime's collector target, memory limit
// and processors (goGCThreshold, goMemoryLimitMB, goMaxProcs: the whole
// calico-node process's), sets the liveness timeout (healthTimeoutOverrides),
// goes to the VXLAN overlay and to the health and metrics
// endpoints (new instruments remake the dataplane), and then selects the
// driver.
func (s *dataplaneSwitch) OnConfigUpdate(cfg *calc.Config) {
	level, err := screenLevel(cfg.LogSeverityScreen)
	if err != nil {
		s.log.WithError(err).Warn("Ignoring logSeverityScreen")
	} else if level != s.logger.GetLevel() {
		s.logger.SetLevel(level)
		s.log.WithField("logSeverityScreen", cfg.LogSeverityScreen).Info("Log level changed")
	}
	s.unused.warn(cfg, s.log)
	s.goRuntime.Apply(goruntime.FromSpec(cfg.Spec.GoGCThreshold, cfg.Spec.GoMemoryLimitMB, cfg.Spec.GoMaxProcs), s.log)
	s.overlay.SetConfig(cfg.Spec)
	s.srv.health.setTimeouts(cfg.Spec.HealthTimeoutOverrides, s.log)
	if s.srv.configure(cfg) && s.d != nil {
		s.restart = true
	}
	s.conf.Metrics = s.srv.instruments()
	s.selectDriver(cfg)
}

// OnOverlayUpdate implements calc.OverlayDataplane.
func (s *dataplaneSwitch) OnOverlayUpdate(o *calc.Overlay) { s.overlay.SetOverlay(o) }
