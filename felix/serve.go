package felix

import (
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
)

// Calico's defaults of the health and metrics settings.
const (
	DefaultHealthHost  = "localhost"
	DefaultHealthPort  = 9099
	DefaultMetricsPort = 9091
	// DefaultDebugHost is where debugPort's profiling server listens
	// unless debugHost says otherwise.
	DefaultDebugHost = "localhost"
)

// serving is where felix serves health and metrics, from the merged
// FelixConfiguration (where felix's FELIX_* environment wins over the
// datastore, as in Calico).
type serving struct {
	// HealthAddr, MetricsAddr and DebugAddr are host:port, "" when
	// disabled. DebugAddr serves Go's profiles (net/http/pprof) when
	// debugPort is set, as Calico's felix does.
	HealthAddr, MetricsAddr, DebugAddr string
	// GoMetrics and ProcessMetrics add the standard collectors.
	GoMetrics, ProcessMetrics bool
}

// servingOf is the serving settings of the merged FelixConfiguration
// spec (felix's environment, as the top layer, included).
func servingOf(s v3.FelixConfigurationSpec) serving {
	var out serving
	if setting(s.HealthEnabled, false) {
		out.HealthAddr = libmetrics.Addr(setting(nonEmpty(s.HealthHost), DefaultHealthHost), setting(s.HealthPort, DefaultHealthPort))
	}
	if setting(s.PrometheusMetricsEnabled, false) {
		out.MetricsAddr = libmetrics.Addr(setting(nonEmpty(&s.PrometheusMetricsHost), ""), setting(s.PrometheusMetricsPort, DefaultMetricsPort))
	}
	if port := setting(s.DebugPort, 0); port > 0 {
		out.DebugAddr = libmetrics.Addr(setting(nonEmpty(s.DebugHost), DefaultDebugHost), port)
	}
	out.GoMetrics = setting(s.PrometheusGoMetricsEnabled, true)
	out.ProcessMetrics = setting(s.PrometheusProcessMetricsEnabled, true)
	return out
}

// setting is a setting's value when set, else def.
func setting[T any](spec *T, def T) T {
	if spec != nil {
		return *spec
	}
	return def
}

// nonEmpty is s, or nil when it is "": an empty host in the spec is unset.
func nonEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}
