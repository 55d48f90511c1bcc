package felix

import (
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestServingOf: each setting is the FELIX_* variable's when set, else
// FelixConfiguration's, else Calico's default (an empty healthHost in the
// spec is unset).
func TestServingOf(t *testing.T) {
	yes, no := true, false
	empty, specHost := "", "10.0.0.1"
	port, debugPort := 9200, 6060
	env := map[string]string{}
	for _, c := range []struct {
		name string
		spec v3.FelixConfigurationSpec
		env  map[string]string
		want serving
	}{
		{name: "defaults", want: serving{GoMetrics: true, ProcessMetrics: true}},
		{name: "health from the spec", spec: v3.FelixConfigurationSpec{HealthEnabled: &yes, HealthPort: &port},
			want: serving{HealthAddr: "localhost:9200", GoMetrics: true, ProcessMetrics: true}},
		{name: "empty healthHost is the default", spec: v3.FelixConfigurationSpec{HealthEnabled: &yes, HealthHost: &empty},
			want: serving{HealthAddr: "localhost:9099", GoMetrics: true, ProcessMetrics: true}},
		{name: "spec host", spec: v3.FelixConfigurationSpec{HealthEnabled: &yes, HealthHost: &specHost},
			want: serving{HealthAddr: "10.0.0.1:9099", GoMetrics: true, ProcessMetrics: true}},
		{name: "the environment wins", spec: v3.FelixConfigurationSpec{HealthEnabled: &no, HealthHost: &specHost, PrometheusGoMetricsEnabled: &yes},
			env:  map[string]string{"FELIX_HEALTHENABLED": "true", "FELIX_HEALTHHOST": "127.0.0.2", "FELIX_PROMETHEUSGOMETRICSENABLED": "false"},
			want: serving{HealthAddr: "127.0.0.2:9099", ProcessMetrics: true}},
		{name: "metrics on all addresses", spec: v3.FelixConfigurationSpec{PrometheusMetricsEnabled: &yes},
			want: serving{MetricsAddr: ":9091", GoMetrics: true, ProcessMetrics: true}},
		{name: "profiles on localhost", spec: v3.FelixConfigurationSpec{DebugPort: &debugPort},
			want: serving{DebugAddr: "localhost:6060", GoMetrics: true, ProcessMetrics: true}},
		{name: "profiles from the environment", env: map[string]string{"FELIX_DEBUGPORT": "6061", "FELIX_DEBUGHOST": "127.0.0.3"},
			want: serving{DebugAddr: "127.0.0.3:6061", GoMetrics: true, ProcessMetrics: true}},
		{name: "metrics from the environment", env: map[string]string{"FELIX_PROMETHEUSMETRICSENABLED": "TRUE", "FELIX_PROMETHEUSMETRICSPORT": "0", "FELIX_PROMETHEUSMETRICSHOST": "::1"},
			want: serving{MetricsAddr: "[::1]:0", GoMetrics: true, ProcessMetrics: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := env
			if c.env != nil {
				e = c.env
			}
			var environ []string
			for k, v := range e {
				environ = append(environ, k+"="+v)
			}
			local, err := ReadLocalConfig(environ, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := servingOf(calc.MergeConfig(&c.spec, nil, &local.Spec).Spec); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
