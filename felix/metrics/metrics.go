// Package metrics is felix's Prometheus instruments, named as Calico's
// felix names them where it has the metric (felix_active_local_endpoints,
// felix_iptables_restore_calls, …) and felix_* or palisade_* names of
// Palisade's own otherwise. A nil *Felix is metrics off: every method is
// then a no-op, so the dataplane's hot path pays nothing.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Felix holds the instruments of one felix.
type Felix struct {
	// Registry is what /metrics serves.
	Registry *prometheus.Registry

	activeEndpoints, activePolicies, activeSelectors prometheus.Gauge
	ipsets, ipsetMembers                             prometheus.Gauge
	restoreCalls, restoreErrors                      prometheus.Counter
	saveCalls, saveErrors                            prometheus.Counter
	ipsetCalls, ipsetErrors                          prometheus.Counter
	nftCalls, nftErrors                              prometheus.Counter
	applyTime                                        prometheus.Histogram
	applyFailures                                    prometheus.Counter
	resyncs                                          prometheus.Counter
	graphUpdates                                     prometheus.Counter
	graphTime                                        prometheus.Histogram
	ctCleaned                                        prometheus.Gauge
	ctCleanedTotal                                   prometheus.Counter
	bpfLoads, bpfLoadErrors                          prometheus.Counter
	inSync, ready                                    prometheus.Gauge
}

// Options choose the standard collectors beside felix's own
// (FelixConfiguration prometheusGoMetricsEnabled and
// prometheusProcessMetricsEnabled, both on by default).
type Options struct {
	Go, Process bool
	// Extra collectors (the datastore's bad values, …).
	Extra []prometheus.Collector
}

// latencyBuckets suit applies and graph updates: 100 µs to ~6.5 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

// New makes the instruments in a registry of their own.
func New(o Options) *Felix {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Felix{
		Registry:        prometheus.NewRegistry(),
		activeEndpoints: gauge("felix_active_local_endpoints", "Number of active endpoints (workload and host) on this host."),
		activePolicies:  gauge("felix_active_local_policies", "Number of active policies on this host (those that select a local endpoint)."),
		activeSelectors: gauge("felix_active_local_selectors", "Number of active selectors (IP sets) on this host."),
		ipsets:          gauge("felix_ipsets_calico", "Number of active Calico IP sets."),
		ipsetMembers:    gauge("felix_ipset_members", "Members of all active Calico IP sets (Palisade)."),
		restoreCalls:    counter("felix_iptables_restore_calls", "Number of iptables-restore calls."),
		restoreErrors:   counter("felix_iptables_restore_errors", "Number of iptables-restore errors."),
		saveCalls:       counter("felix_iptables_save_calls", "Number of iptables-save calls."),
		saveErrors:      counter("felix_iptables_save_errors", "Number of iptables-save errors."),
		ipsetCalls:      counter("felix_ipset_calls", "Number of ipset commands and netlink IP set transactions."),
		ipsetErrors:     counter("felix_ipset_errors", "Number of failed ipset commands and netlink IP set transactions."),
		nftCalls:        counter("felix_nftables_netlink_calls", "nftables transactions written over netlink instead of iptables-restore (Palisade)."),
		nftErrors:       counter("felix_nftables_netlink_errors", "Failed nftables netlink transactions (Palisade)."),
		applyTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_int_dataplane_apply_time_seconds",
			Help: "Time in seconds that it took to apply a dataplane update.", Buckets: latencyBuckets}),
		applyFailures: counter("felix_int_dataplane_failures", "Number of times dataplane updates failed and will be retried."),
		resyncs:       counter("felix_resyncs_started", "Number of times felix has started resyncing with the datastore."),
		graphUpdates:  counter("felix_calc_graph_updates_processed", "Number of datastore updates processed by the calculation graph."),
		graphTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_calc_graph_update_time_seconds",
			Help: "Seconds to update the calculation graph for each batch of datastore updates.", Buckets: latencyBuckets}),
		ctCleaned:      gauge("felix_bpf_conntrack_cleaned", "Number of entries cleaned during the last conntrack table sweep."),
		ctCleanedTotal: counter("felix_bpf_conntrack_cleaned_total", "Total number of entries cleaned during conntrack table sweeps."),
		bpfLoads:       counter("felix_bpf_program_loads", "eBPF policy programs loaded (Palisade)."),
		bpfLoadErrors:  counter("felix_bpf_program_load_errors", "eBPF policy programs that failed to load; the endpoint drops (Palisade)."),
		inSync:         gauge("felix_resync_state_in_sync", "1 once felix has read the datastore completely (Palisade)."),
		ready:          gauge("felix_ready", "1 while felix reports ready on /readiness (Palisade)."),
	}
	m.Registry.MustRegister(m.activeEndpoints, m.activePolicies, m.activeSelectors, m.ipsets, m.ipsetMembers,
		m.restoreCalls, m.restoreErrors, m.saveCalls, m.saveErrors, m.ipsetCalls, m.ipsetErrors, m.nftCalls, m.nftErrors,
		m.applyTime, m.applyFailures, m.resyncs, m.graphUpdates, m.graphTime, m.ctCleaned, m.ctCleanedTotal,
		m.bpfLoads, m.bpfLoadErrors, m.inSync, m.ready)
	if o.Go {
		m.Registry.MustRegister(collectors.NewGoCollector())
	}
	if o.Process {
		m.Registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m.Registry.MustRegister(o.Extra...)
	return m
}

func count(c, errs prometheus.Counter, err error) {
	c.Inc()
	if err != nil {
		errs.Inc()
	}
}

// Restore counts one iptables-restore run.
func (m *Felix) Restore(err error) {
	if m != nil {
		count(m.restoreCalls, m.restoreErrors, err)
	}
}

// Save counts one iptables-save run.
func (m *Felix) Save(err error) {
	if m != nil {
		count(m.saveCalls, m.saveErrors, err)
	}
}

// IPSet counts one ipset command or netlink IP set transaction.
func (m *Felix) IPSet(err error) {
	if m != nil {
		count(m.ipsetCalls, m.ipsetErrors, err)
	}
}

// Netlink counts one nftables transaction sent over netlink.
func (m *Felix) Netlink(err error) {
	if m != nil {
		count(m.nftCalls, m.nftErrors, err)
	}
}

// Applied records one dataplane apply.
func (m *Felix) Applied(took time.Duration, err error) {
	if m == nil {
		return
	}
	m.applyTime.Observe(took.Seconds())
	if err != nil {
		m.applyFailures.Inc()
	}
}

// Resync counts a resync with the datastore (a first list or a list
// again after a watch ended).
func (m *Felix) Resync() {
	if m != nil {
		m.resyncs.Inc()
	}
}

// GraphUpdated records one batch of n datastore updates given to the
// calculation graph.
func (m *Felix) GraphUpdated(n int, took time.Duration) {
	if m == nil {
		return
	}
	m.graphUpdates.Add(float64(n))
	m.graphTime.Observe(took.Seconds())
}

// Active sets the counts of what this host enforces: selectors are the IP
// sets of rule selectors and named ports (not the IP pool sets).
func (m *Felix) Active(endpoints, policies, selectors, ipsets, members int) {
	if m == nil {
		return
	}
	m.activeEndpoints.Set(float64(endpoints))
	m.activePolicies.Set(float64(policies))
	m.activeSelectors.Set(float64(selectors))
	m.ipsets.Set(float64(ipsets))
	m.ipsetMembers.Set(float64(members))
}

// ConntrackCleaned records one sweep of the eBPF conntrack map.
func (m *Felix) ConntrackCleaned(n int) {
	if m == nil {
		return
	}
	m.ctCleaned.Set(float64(n))
	m.ctCleanedTotal.Add(float64(n))
}

// ProgramLoaded counts one eBPF policy program load.
func (m *Felix) ProgramLoaded(err error) {
	if m != nil {
		count(m.bpfLoads, m.bpfLoadErrors, err)
	}
}

// State records whether felix is in sync and ready.
func (m *Felix) State(inSync, ready bool) {
	if m == nil {
		return
	}
	b := map[bool]float64{true: 1}
	m.inSync.Set(b[inSync])
	m.ready.Set(b[ready])
}
