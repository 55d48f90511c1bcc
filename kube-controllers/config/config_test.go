package config

import (
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"defaults", map[string]string{"ETCD_ENDPOINTS": "http://127.0.0.1:2379"}, ""},
		{"no endpoints", map[string]string{}, "ETCD_ENDPOINTS is required"},
		{"kubernetes datastore", map[string]string{"ETCD_ENDPOINTS": "http://e:2379", "DATASTORE_TYPE": "kubernetes"}, `DATASTORE_TYPE "kubernetes" is not supported`},
		{"half a client certificate", map[string]string{"ETCD_ENDPOINTS": "https://e:2379", "ETCD_CERT_FILE": "c.pem"}, "must be given together"},
		{"lease timings", map[string]string{"ETCD_ENDPOINTS": "http://e:2379", "LEASE_DURATION": "2s", "LEASE_RENEW_DEADLINE": "5s"}, "LEASE_RETRY_PERIOD"},
		{"health port", map[string]string{"ETCD_ENDPOINTS": "http://e:2379", "HEALTH_PORT": "70000"}, "HEALTH_PORT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := FromEnv(func(k string) string { return tc.env[k] })
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.LeaseNamespace != "kube-system" || s.LeaseName != "calico-kube-controllers" || s.Identity == "" {
					t.Errorf("defaults: %+v", s)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestMerge checks that the environment overrides the resource field by
// field, that the status names what overrode it, and that what cannot
// run is refused.
func TestMerge(t *testing.T) {
	def := Default().Spec
	r, st, warnings, err := Merge(def, nil, nil)
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	if got := strings.Join(r.Enabled, ","); got != "policy,adminnetworkpolicy,namespace,serviceaccount,workloadendpoint,node,loadbalancer" || r.AssignIPs != "AllServices" {
		t.Errorf("default controllers %s", got)
	}
	if r.LeakGracePeriod != 15*time.Minute || r.ReconcilerPeriod[Policy] != 5*time.Minute || r.MetricsPort != 9094 || !r.SyncLabels || r.CompactionPeriod != 10*time.Minute {
		t.Errorf("defaults: %+v", r)
	}
	if st.EnvironmentVars != nil || st.RunningConfig == nil || st.RunningConfig.Controllers.Node.LeakGracePeriod.Duration != 15*time.Minute {
		t.Errorf("status %+v", st)
	}

	env := map[string]string{"ENABLED_CONTROLLERS": "node, policy", "RECONCILER_PERIOD": "30s", "LOG_LEVEL": "debug",
		"SYNC_NODE_LABELS": "false", "HEALTH_ENABLED": "false", "COMPACTION_PERIOD": "0"}
	port := 9999
	r, st, _, err = Merge(def, env, &port)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Enabled, ","); got != "policy,node" || r.ReconcilerPeriod[Node] != 30*time.Second ||
		r.LogLevel != "debug" || r.SyncLabels || r.HealthEnabled || r.CompactionPeriod != 0 || r.MetricsPort != 9999 {
		t.Errorf("with the environment: %+v", r)
	}
	if len(st.EnvironmentVars) != len(env) || st.EnvironmentVars["ENABLED_CONTROLLERS"] != "node, policy" {
		t.Errorf("status environmentVars %v", st.EnvironmentVars)
	}
	if st.RunningConfig.Controllers.Namespace != nil || st.RunningConfig.Controllers.Node.SyncLabels != "Disabled" || st.RunningConfig.LogSeverityScreen != "Debug" {
		t.Errorf("running config %+v", st.RunningConfig)
	}

	// A spec naming only some controllers runs only those.
	spec := v3.KubeControllersConfigurationSpec{Controllers: v3.ControllersConfig{Namespace: &v3.NamespaceControllerConfig{}}}
	r, _, _, err = Merge(spec, nil, nil)
	if err != nil || strings.Join(r.Enabled, ",") != "namespace" {
		t.Errorf("namespace only: %v %v", r.Enabled, err)
	}

	spec = def
	spec.Controllers.LoadBalancer = &v3.LoadBalancerControllerConfig{AssignIPs: "RequestedServicesOnly"}
	r, st, warnings, err = Merge(spec, nil, nil)
	if err != nil || len(warnings) != 0 || r.AssignIPs != "RequestedServicesOnly" || !r.IsEnabled(LoadBalancer) ||
		st.RunningConfig.Controllers.LoadBalancer == nil || st.RunningConfig.Controllers.LoadBalancer.AssignIPs != "RequestedServicesOnly" {
		t.Errorf("loadBalancer: %+v %v %v", r, warnings, err)
	}
	spec.Controllers.LoadBalancer = &v3.LoadBalancerControllerConfig{AssignIPs: "Some"}
	if _, _, _, err = Merge(spec, nil, nil); err == nil || !strings.Contains(err.Error(), "assignIPs") {
		t.Errorf("assignIPs Some: %v", err)
	}
	for _, bad := range []map[string]string{
		{"ENABLED_CONTROLLERS": "policy,routes"},
		{"RECONCILER_PERIOD": "-1s"},
		{"LOG_LEVEL": "loud"},
		{"AUTO_HOST_ENDPOINTS": "enabled"},
		{"SYNC_NODE_LABELS": "maybe"},
	} {
		if _, _, _, err := Merge(def, bad, nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	spec = def
	spec.Controllers.Node.HostEndpoint = &v3.AutoHostEndpointConfig{AutoCreate: "Enabled"}
	if _, _, _, err := Merge(spec, nil, nil); err == nil || !strings.Contains(err.Error(), "host endpoints") {
		t.Errorf("autoCreate Enabled: %v", err)
	}
}
