package kubecontrollers

import (
	"context"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// queueMetrics is the controllers' work queues' metrics, by controller:
// the sync lag (how long a change waits in the queue before its
// controller takes it), the time to handle it, depth, adds and retries.
// It implements workqueue.MetricsProvider.
type queueMetrics struct {
	lag, work           *prometheus.HistogramVec
	depth               *prometheus.GaugeVec
	unfinished, longest *prometheus.GaugeVec
	adds, retries       *prometheus.CounterVec
}

func newQueueMetrics() *queueMetrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 20)
	l := []string{"controller"}
	return &queueMetrics{
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "calico_kube_controllers_sync_lag_seconds",
			Help: "Seconds a change waited in the controller's queue before it was handled.", Buckets: buckets}, l),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "calico_kube_controllers_work_duration_seconds",
			Help: "Seconds the controller took to handle one change.", Buckets: buckets}, l),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_kube_controllers_queue_depth",
			Help: "Changes waiting in the controller's queue."}, l),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_kube_controllers_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet finished."}, l),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_kube_controllers_longest_running_processor_seconds",
			Help: "Seconds the longest running handling has been going."}, l),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calico_kube_controllers_queue_adds_total",
			Help: "Changes added to the controller's queue."}, l),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calico_kube_controllers_queue_retries_total",
			Help: "Changes queued again after a failure."}, l),
	}
}

func (q *queueMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(q.lag, q.work, q.depth, q.unfinished, q.longest, q.adds, q.retries)
}

var _ workqueue.MetricsProvider = (*queueMetrics)(nil)

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.lag.WithLabelValues(name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// reclaimedCounter counts each address the IPAM garbage collector
// released, by the pool that holds it and its node.
func reclaimedCounter(ctx context.Context, store datastore.Interface, c *prometheus.CounterVec) func(ip, node string) {
	return func(ip, node string) {
		pool := noPool
		a, err := netip.ParseAddr(ip)
		if err == nil {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pools, perr := poolCIDRs(lctx, store)
			cancel()
			if perr == nil {
				pool = poolOf(pools, netip.PrefixFrom(a, a.BitLen()))
			}
		}
		c.WithLabelValues(pool, node).Inc()
	}
}
