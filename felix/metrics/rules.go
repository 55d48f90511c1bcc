package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
)

// Per-rule metrics (Palisade's own: Calico's felix has none). One series
// per policy or profile rule the dataplane has written on this node, read
// from the dataplane at each scrape (iptables rule counters, or the eBPF
// dataplane's per-CPU map): a rule of a policy deleted or no longer active
// here is not written, so its series are gone at the next scrape, and the
// number of series is the number of rules of the node's active policies
// and profiles.
var (
	ruleLabels  = []string{"kind", "tier", "namespace", "name", "direction", "rule_index", "action"}
	rulePackets = prometheus.NewDesc("felix_policy_rule_packets_total",
		"Packets a policy or profile rule decided (or, for Pass and Log, matched) since the dataplane wrote it (Palisade).", ruleLabels, nil)
	ruleBytes = prometheus.NewDesc("felix_policy_rule_bytes_total",
		"Bytes, from the IP header on, of the packets a policy or profile rule decided or matched since the dataplane wrote it (Palisade).", ruleLabels, nil)
)

// ruleScrapeTimeout bounds one read of the counters at a scrape.
const ruleScrapeTimeout = 5 * time.Second

// RuleCounters is a collector of the per-rule counters of a dataplane.
type RuleCounters struct {
	src calc.CounterSource
	log *log.Entry
}

// NewRuleCounters makes the collector; src is felix's (its Inspector).
func NewRuleCounters(src calc.CounterSource, logger *log.Entry) *RuleCounters {
	return &RuleCounters{src: src, log: logger}
}

// Describe implements prometheus.Collector.
func (r *RuleCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- rulePackets
	ch <- ruleBytes
}

// Collect implements prometheus.Collector: the counters as they are now.
// A dataplane that cannot be read (not started yet) gives no series.
func (r *RuleCounters) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ruleScrapeTimeout)
	defer cancel()
	cs, err := r.src.RuleCounters(ctx)
	if err != nil {
		r.log.WithError(err).Warn("Per-rule counters not read for /metrics")
	}
	for _, c := range cs {
		labels := []string{c.Kind, c.Tier, c.Namespace, c.Name, c.Direction, strconv.Itoa(c.Index), string(c.Action)}
		ch <- prometheus.MustNewConstMetric(rulePackets, prometheus.CounterValue, float64(c.Packets), labels...)
		ch <- prometheus.MustNewConstMetric(ruleBytes, prometheus.CounterValue, float64(c.Bytes), labels...)
	}
}
