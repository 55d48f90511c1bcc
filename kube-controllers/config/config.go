// Package config reads calico-kube-controllers' settings as Calico's
// does: the datastore and Kubernetes connection from the environment,
// the rest from the KubeControllersConfiguration "default", with the
// environment variables Calico honours (LOG_LEVEL, ENABLED_CONTROLLERS,
// RECONCILER_PERIOD, COMPACTION_PERIOD, HEALTH_ENABLED, SYNC_NODE_LABELS,
// AUTO_HOST_ENDPOINTS) overriding its fields; the merged result is what
// the controllers run with and what the resource's status reports.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// Controller names, as ENABLED_CONTROLLERS lists them.
const (
	Node             = "node"
	Policy           = "policy"
	Namespace        = "namespace"
	ServiceAccount   = "serviceaccount"
	WorkloadEndpoint = "workloadendpoint"
	// LoadBalancer is the LoadBalancer IPAM controller.
	LoadBalancer = "loadbalancer"
	// AdminNetworkPolicy mirrors AdminNetworkPolicies and the
	// BaselineAdminNetworkPolicy (a Palisade addition: Calico converts
	// them only with the Kubernetes datastore). It runs with the policy
	// controller, at its period, unless ENABLED_CONTROLLERS says otherwise.
	AdminNetworkPolicy = "adminnetworkpolicy"
)

// AllControllers are the controllers Palisade runs, in start order.
var AllControllers = []string{Policy, AdminNetworkPolicy, Namespace, ServiceAccount, WorkloadEndpoint, Node, LoadBalancer}

// Defaults, as Calico's.
const (
	DefaultReconcilerPeriod = 5 * time.Minute
	DefaultLeakGracePeriod  = 15 * time.Minute
	DefaultCompactionPeriod = 10 * time.Minute
	DefaultMetricsPort      = 9094
	DefaultLeaseName        = "calico-kube-controllers"
	DefaultLeaseNamespace   = "kube-system"
	// ConfigName is the one KubeControllersConfiguration read.
	ConfigName = "default"
)

// Static is what only the environment sets: how to reach etcd and the
// API server, and the leader election.
type Static struct {
	Etcd       etcdv3.Config
	Kubeconfig string
	// LeaseNamespace and LeaseName name the coordination.k8s.io Lease
	// replicas elect a leader through; Identity is this replica's.
	LeaseNamespace, LeaseName, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// HealthPort, when set (HEALTH_PORT, a Palisade addition), overrides
	// the configuration's prometheusMetricsPort as the port of the health
	// and metrics server.
	HealthPort *int
	// Env holds the overriding variables that were set.
	Env map[string]string
}

// overriding are the variables that override the resource.
var overriding = []string{"LOG_LEVEL", "ENABLED_CONTROLLERS", "RECONCILER_PERIOD", "COMPACTION_PERIOD",
	"HEALTH_ENABLED", "SYNC_NODE_LABELS", "AUTO_HOST_ENDPOINTS"}

// FromEnv reads the static settings and the overriding variables.
func FromEnv(getenv func(string) string) (Static, error) {
	s := Static{Env: map[string]string{}, LeaseName: DefaultLeaseName, LeaseNamespace: DefaultLeaseNamespace,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	switch t := getenv("DATASTORE_TYPE"); t {
	case "", v3.DatastoreEtcdV3:
	default:
		return s, fmt.Errorf("DATASTORE_TYPE %q is not supported: Palisade keeps its state in etcd (%s)", t, v3.DatastoreEtcdV3)
	}
	for _, e := range strings.Split(getenv("ETCD_ENDPOINTS"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			s.Etcd.Endpoints = append(s.Etcd.Endpoints, e)
		}
	}
	if len(s.Etcd.Endpoints) == 0 {
		return s, errors.New("ETCD_ENDPOINTS is required (DATASTORE_TYPE=etcdv3)")
	}
	s.Etcd.Username, s.Etcd.Password = getenv("ETCD_USERNAME"), getenv("ETCD_PASSWORD")
	s.Etcd.KeyFile, s.Etcd.CertFile, s.Etcd.CACertFile = getenv("ETCD_KEY_FILE"), getenv("ETCD_CERT_FILE"), getenv("ETCD_CA_CERT_FILE")
	if (s.Etcd.KeyFile == "") != (s.Etcd.CertFile == "") {
		return s, errors.New("ETCD_KEY_FILE and ETCD_CERT_FILE must be given together")
	}
	s.Kubeconfig = getenv("KUBECONFIG")
	if v := getenv("LEASE_NAMESPACE"); v != "" {
		s.LeaseNamespace = v
	} else if v := getenv("POD_NAMESPACE"); v != "" {
		s.LeaseNamespace = v
	}
	if v := getenv("LEASE_NAME"); v != "" {
		s.LeaseName = v
	}
	s.Identity = getenv("POD_NAME")
	if s.Identity == "" {
		host, _ := os.Hostname()
		s.Identity = host + "-" + strconv.Itoa(os.Getpid())
	}
	for _, d := range []struct {
		name string
		into *time.Duration
	}{{"LEASE_DURATION", &s.LeaseDuration}, {"LEASE_RENEW_DEADLINE", &s.RenewDeadline}, {"LEASE_RETRY_PERIOD", &s.RetryPeriod}} {
		if v := getenv(d.name); v != "" {
			p, err := time.ParseDuration(v)
			if err != nil || p <= 0 {
				return s, fmt.Errorf("%s %q is not a positive duration", d.name, v)
			}
			*d.into = p
		}
	}
	if s.RenewDeadline >= s.LeaseDuration || s.RetryPeriod >= s.RenewDeadline {
		return s, fmt.Errorf("leader election wants LEASE_RETRY_PERIOD (%s) < LEASE_RENEW_DEADLINE (%s) < LEASE_DURATION (%s)",
			s.RetryPeriod, s.RenewDeadline, s.LeaseDuration)
	}
	if v := getenv("HEALTH_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			return s, fmt.Errorf("HEALTH_PORT %q: want 0-65535", v)
		}
		s.HealthPort = &p
	}
	for _, name := range overriding {
		if v := getenv(name); v != "" {
			s.Env[name] = v
		}
	}
	return s, nil
}

// Run is what the controllers run with.
type Run struct {
	LogLevel string
	// Enabled are the controllers to run, in AllControllers order.
	Enabled []string
	// ReconcilerPeriod is each enabled controller's full resync period.
	ReconcilerPeriod map[string]time.Duration
	// LeakGracePeriod is how long an address must stay leaked before IPAM
	// garbage collection releases it; 0 turns the collection off.
	LeakGracePeriod time.Duration
	// SyncLabels copies Kubernetes node labels onto Calico nodes.
	SyncLabels bool
	// CompactionPeriod is how often etcd is compacted; 0 never.
	CompactionPeriod time.Duration
	// HealthEnabled serves /liveness and /readiness.
	HealthEnabled bool
	// MetricsPort is the port of the health and metrics server (0: none).
	MetricsPort int
	// AssignIPs is the loadbalancer controller's AllServices or
	// RequestedServicesOnly.
	AssignIPs string
}

// IsEnabled says whether controller name runs.
func (r Run) IsEnabled(name string) bool { return slices.Contains(r.Enabled, name) }

// Default is the KubeControllersConfiguration created when none exists,
// with Calico's defaults.
func Default() *v3.KubeControllersConfiguration {
	period := func() *v3.Duration { return v3.NewDuration(DefaultReconcilerPeriod) }
	port := DefaultMetricsPort
	return &v3.KubeControllersConfiguration{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindKubeControllersConfiguration, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: ConfigName},
		Spec: v3.KubeControllersConfigurationSpec{
			LogSeverityScreen:      "Info",
			HealthChecks:           "Enabled",
			EtcdV3CompactionPeriod: v3.NewDuration(DefaultCompactionPeriod),
			PrometheusMetricsPort:  &port,
			Controllers: v3.ControllersConfig{
				Node: &v3.NodeControllerConfig{ReconcilerPeriod: period(), SyncLabels: "Enabled",
					HostEndpoint: &v3.AutoHostEndpointConfig{AutoCreate: "Disabled"}, LeakGracePeriod: v3.NewDuration(DefaultLeakGracePeriod)},
				Policy:           &v3.PolicyControllerConfig{ReconcilerPeriod: period()},
				WorkloadEndpoint: &v3.WorkloadEndpointControllerConfig{ReconcilerPeriod: period()},
				ServiceAccount:   &v3.ServiceAccountControllerConfig{ReconcilerPeriod: period()},
				Namespace:        &v3.NamespaceControllerConfig{ReconcilerPeriod: period()},
				LoadBalancer:     &v3.LoadBalancerControllerConfig{AssignIPs: "AllServices"},
			},
		},
	}
}

// Merge combines the resource's spec with the overriding environment
// variables into what runs, and the status to report: the running
// configuration as a spec, and the variables that overrode it. It
// returns warnings for settings accepted but not acted on, and an error
// for settings that cannot run (Palisade never runs something narrower
// in protection than asked: auto host endpoints are refused).
func Merge(spec v3.KubeControllersConfigurationSpec, env map[string]string, healthPort *int) (Run, v3.KubeControllersConfigurationStatus, []string, error) {
	var warnings []string
	r := Run{ReconcilerPeriod: map[string]time.Duration{}, LogLevel: "info", HealthEnabled: true,
		CompactionPeriod: DefaultCompactionPeriod, LeakGracePeriod: DefaultLeakGracePeriod, MetricsPort: DefaultMetricsPort}
	status := v3.KubeControllersConfigurationStatus{EnvironmentVars: map[string]string{}}
	c := spec.Controllers
	durationOf := func(d *v3.Duration, def time.Duration) time.Duration {
		if d == nil {
			return def
		}
		return d.Duration
	}

	// Which controllers, and their periods.
	periods := map[string]*v3.Duration{}
	enabled := map[string]bool{}
	if c.Policy != nil {
		enabled[Policy], periods[Policy] = true, c.Policy.ReconcilerPeriod
		enabled[AdminNetworkPolicy], periods[AdminNetworkPolicy] = true, c.Policy.ReconcilerPeriod
	}
	if c.Namespace != nil {
		enabled[Namespace], periods[Namespace] = true, c.Namespace.ReconcilerPeriod
	}
	if c.ServiceAccount != nil {
		enabled[ServiceAccount], periods[ServiceAccount] = true, c.ServiceAccount.ReconcilerPeriod
	}
	if c.WorkloadEndpoint != nil {
		enabled[WorkloadEndpoint], periods[WorkloadEndpoint] = true, c.WorkloadEndpoint.ReconcilerPeriod
	}
	if c.Node != nil {
		enabled[Node], periods[Node] = true, c.Node.ReconcilerPeriod
	}
	r.AssignIPs = "AllServices"
	if c.LoadBalancer != nil {
		enabled[LoadBalancer] = true
		if c.LoadBalancer.AssignIPs != "" {
			r.AssignIPs = c.LoadBalancer.AssignIPs
		}
		switch r.AssignIPs {
		case "AllServices", "RequestedServicesOnly":
		default:
			return r, status, warnings, fmt.Errorf("spec.controllers.loadBalancer.assignIPs %q: want AllServices or RequestedServicesOnly", r.AssignIPs)
		}
	}
	if v, ok := env["ENABLED_CONTROLLERS"]; ok {
		status.EnvironmentVars["ENABLED_CONTROLLERS"] = v
		enabled = map[string]bool{}
		for _, name := range strings.Split(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			switch {
			case name == "":
			case slices.Contains(AllControllers, name):
				enabled[name] = true
			default:
				return r, status, warnings, fmt.Errorf("ENABLED_CONTROLLERS %q: unknown controller %q (want %s)", v, name, strings.Join(AllControllers, ", "))
			}
		}
	}
	var envPeriod *time.Duration
	if v, ok := env["RECONCILER_PERIOD"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return r, status, warnings, fmt.Errorf("RECONCILER_PERIOD %q is not a positive duration", v)
		}
		status.EnvironmentVars["RECONCILER_PERIOD"] = v
		envPeriod = &d
	}
	for _, name := range AllControllers {
		if !enabled[name] {
			continue
		}
		r.Enabled = append(r.Enabled, name)
		p := durationOf(periods[name], DefaultReconcilerPeriod)
		if envPeriod != nil {
			p = *envPeriod
		}
		if p <= 0 {
			return r, status, warnings, fmt.Errorf("the %s controller's reconcilerPeriod %s must be positive", name, p)
		}
		r.ReconcilerPeriod[name] = p
	}

	// Logging.
	if spec.LogSeverityScreen != "" {
		r.LogLevel = strings.ToLower(spec.LogSeverityScreen)
	}
	if v, ok := env["LOG_LEVEL"]; ok {
		status.EnvironmentVars["LOG_LEVEL"] = v
		r.LogLevel = strings.ToLower(v)
	}
	switch r.LogLevel {
	case "trace", "debug", "info", "warning", "warn", "error", "fatal", "panic", "none":
	default:
		return r, status, warnings, fmt.Errorf("log level %q: want none, debug, info, warning, error, fatal or panic", r.LogLevel)
	}

	// The node controller's settings.
	r.SyncLabels = true
	if c.Node != nil {
		r.LeakGracePeriod = durationOf(c.Node.LeakGracePeriod, DefaultLeakGracePeriod)
		r.SyncLabels = c.Node.SyncLabels != "Disabled"
	}
	if v, ok := env["SYNC_NODE_LABELS"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return r, status, warnings, fmt.Errorf("SYNC_NODE_LABELS %q: want true or false", v)
		}
		status.EnvironmentVars["SYNC_NODE_LABELS"] = v
		r.SyncLabels = b
	}
	autoHEP := c.Node != nil && c.Node.HostEndpoint != nil && c.Node.HostEndpoint.AutoCreate == "Enabled"
	if v, ok := env["AUTO_HOST_ENDPOINTS"]; ok {
		status.EnvironmentVars["AUTO_HOST_ENDPOINTS"] = v
		switch strings.ToLower(v) {
		case "enabled":
			autoHEP = true
		case "disabled":
			autoHEP = false
		default:
			return r, status, warnings, fmt.Errorf("AUTO_HOST_ENDPOINTS %q: want enabled or disabled", v)
		}
	}
	if autoHEP {
		return r, status, warnings, errors.New("automatic host endpoints are not implemented in Palisade: " +
			"the hosts would run without the policy they ask for; set spec.controllers.node.hostEndpoint.autoCreate (or AUTO_HOST_ENDPOINTS) to Disabled")
	}
	if c.Node != nil && c.Node.HostEndpoint != nil && len(c.Node.HostEndpoint.Templates) > 0 {
		warnings = append(warnings, "spec.controllers.node.hostEndpoint.templates: only used with autoCreate, which Palisade does not implement; not acted on")
	}
	if c.Node != nil && c.Node.HostEndpoint != nil && c.Node.HostEndpoint.CreateDefaultHostEndpoint != "" {
		warnings = append(warnings, "spec.controllers.node.hostEndpoint.createDefaultHostEndpoint: only used with autoCreate, which Palisade does not implement; not acted on")
	}

	// etcd compaction, health and the server's port.
	r.CompactionPeriod = durationOf(spec.EtcdV3CompactionPeriod, DefaultCompactionPeriod)
	if v, ok := env["COMPACTION_PERIOD"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return r, status, warnings, fmt.Errorf("COMPACTION_PERIOD %q is not a duration", v)
		}
		status.EnvironmentVars["COMPACTION_PERIOD"] = v
		r.CompactionPeriod = d
	}
	r.HealthEnabled = spec.HealthChecks != "Disabled"
	if v, ok := env["HEALTH_ENABLED"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return r, status, warnings, fmt.Errorf("HEALTH_ENABLED %q: want true or false", v)
		}
		status.EnvironmentVars["HEALTH_ENABLED"] = v
		r.HealthEnabled = b
	}
	if spec.PrometheusMetricsPort != nil {
		r.MetricsPort = *spec.PrometheusMetricsPort
	}
	if healthPort != nil {
		r.MetricsPort = *healthPort
	}
	if spec.DebugProfilePort != nil && *spec.DebugProfilePort != 0 {
		warnings = append(warnings, "spec.debugProfilePort: Palisade serves no profiling endpoint; not acted on")
	}
	if len(status.EnvironmentVars) == 0 {
		status.EnvironmentVars = nil
	}
	running := r.Spec()
	status.RunningConfig = &running
	return r, status, warnings, nil
}

// Spec renders what runs as a KubeControllersConfiguration spec.
func (r Run) Spec() v3.KubeControllersConfigurationSpec {
	port := r.MetricsPort
	health := "Enabled"
	if !r.HealthEnabled {
		health = "Disabled"
	}
	s := v3.KubeControllersConfigurationSpec{
		LogSeverityScreen:      logSeverity(r.LogLevel),
		HealthChecks:           health,
		EtcdV3CompactionPeriod: v3.NewDuration(r.CompactionPeriod),
		PrometheusMetricsPort:  &port,
	}
	period := func(name string) *v3.Duration { return v3.NewDuration(r.ReconcilerPeriod[name]) }
	for _, name := range r.Enabled {
		switch name {
		case Policy:
			s.Controllers.Policy = &v3.PolicyControllerConfig{ReconcilerPeriod: period(name)}
		case Namespace:
			s.Controllers.Namespace = &v3.NamespaceControllerConfig{ReconcilerPeriod: period(name)}
		case ServiceAccount:
			s.Controllers.ServiceAccount = &v3.ServiceAccountControllerConfig{ReconcilerPeriod: period(name)}
		case WorkloadEndpoint:
			s.Controllers.WorkloadEndpoint = &v3.WorkloadEndpointControllerConfig{ReconcilerPeriod: period(name)}
		case Node:
			sync := "Enabled"
			if !r.SyncLabels {
				sync = "Disabled"
			}
			s.Controllers.Node = &v3.NodeControllerConfig{ReconcilerPeriod: period(name), SyncLabels: sync,
				HostEndpoint: &v3.AutoHostEndpointConfig{AutoCreate: "Disabled"}, LeakGracePeriod: v3.NewDuration(r.LeakGracePeriod)}
		case LoadBalancer:
			s.Controllers.LoadBalancer = &v3.LoadBalancerControllerConfig{AssignIPs: r.AssignIPs}
		}
	}
	return s
}

// logSeverity is Calico's spelling of a log level.
func logSeverity(level string) string {
	switch level {
	case "warn", "warning":
		return "Warning"
	case "":
		return "Info"
	}
	return strings.ToUpper(level[:1]) + level[1:]
}
