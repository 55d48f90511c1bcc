package felix

import (
	"fmt"
	"strconv"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
)

// Calico's defaults of the health and metrics settings.
const (
	DefaultHealthHost  = "localhost"
	DefaultHealthPort  = 9099
	DefaultMetricsPort = 9091
)

// serving is where felix serves health and metrics, from
// FelixConfiguration and the FELIX_* environment variables of the same
// names, which win over the datastore as in Calico.
type serving struct {
	// HealthAddr and MetricsAddr are host:port, "" when disabled.
	HealthAddr, MetricsAddr string
	// GoMetrics and ProcessMetrics add the standard collectors.
	GoMetrics, ProcessMetrics bool
}

// overrides are the FELIX_* variables felix reads, parsed once.
type overrides struct {
	healthEnabled, metricsEnabled, goMetrics, processMetrics *bool
	healthHost, metricsHost                                  *string
	healthPort, metricsPort                                  *int
}

// readOverrides parses the FELIX_* variables of the health and metrics
// settings; a value that does not parse is an error naming it.
func readOverrides(getenv func(string) string) (overrides, error) {
	var o overrides
	if getenv == nil {
		return o, nil
	}
	boolVar := func(name string, dst **bool) error {
		v := getenv(name)
		if v == "" {
			return nil
		}
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err != nil {
			return fmt.Errorf("%s %q: want true or false", name, v)
		}
		*dst = &b
		return nil
	}
	intVar := func(name string, dst **int) error {
		v := getenv(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: want a port number 0-65535", name, v)
		}
		*dst = &n
		return nil
	}
	strVar := func(name string, dst **string) {
		if v := getenv(name); v != "" {
			*dst = &v
		}
	}
	for _, err := range []error{
		boolVar("FELIX_HEALTHENABLED", &o.healthEnabled),
		boolVar("FELIX_PROMETHEUSMETRICSENABLED", &o.metricsEnabled),
		boolVar("FELIX_PROMETHEUSGOMETRICSENABLED", &o.goMetrics),
		boolVar("FELIX_PROMETHEUSPROCESSMETRICSENABLED", &o.processMetrics),
		intVar("FELIX_HEALTHPORT", &o.healthPort),
		intVar("FELIX_PROMETHEUSMETRICSPORT", &o.metricsPort),
	} {
		if err != nil {
			return o, err
		}
	}
	strVar("FELIX_HEALTHHOST", &o.healthHost)
	strVar("FELIX_PROMETHEUSMETRICSHOST", &o.metricsHost)
	return o, nil
}

// servingOf is the serving settings of a FelixConfiguration spec with the
// environment's overrides.
func servingOf(s v3.FelixConfigurationSpec, o overrides) serving {
	var out serving
	if setting(o.healthEnabled, s.HealthEnabled, false) {
		out.HealthAddr = libmetrics.Addr(setting(o.healthHost, nonEmpty(s.HealthHost), DefaultHealthHost), setting(o.healthPort, s.HealthPort, DefaultHealthPort))
	}
	if setting(o.metricsEnabled, s.PrometheusMetricsEnabled, false) {
		out.MetricsAddr = libmetrics.Addr(setting(o.metricsHost, nonEmpty(&s.PrometheusMetricsHost), ""), setting(o.metricsPort, s.PrometheusMetricsPort, DefaultMetricsPort))
	}
	out.GoMetrics = setting(o.goMetrics, s.PrometheusGoMetricsEnabled, true)
	out.ProcessMetrics = setting(o.processMetrics, s.PrometheusProcessMetricsEnabled, true)
	return out
}

// setting is a setting's value: the environment's when set, else the
// spec's when set, else def.
func setting[T any](env, spec *T, def T) T {
	switch {
	case env != nil:
		return *env
	case spec != nil:
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
