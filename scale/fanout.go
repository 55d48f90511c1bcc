package scale

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// FanOutMetrics are the values FanOut reports.
var FanOutMetrics = []Metric{
	{"sync_all_s", "all agents in sync (cold start)", "s"},
	{"policy_p50_ms", "policy change to all agents p50", "ms"},
	{"policy_p99_ms", "policy change p99", "ms"},
	{"wep_p50_ms", "new endpoint to all agents p50", "ms"},
	{"wep_p99_ms", "new endpoint p99", "ms"},
	{"etcd_cpu_ms", "etcd CPU per change", "ms"},
	{"etcd_kib", "etcd bytes sent per change", "KiB"},
	{"etcd_rss_mb", "etcd RSS", "MiB"},
	{"agent_kib", "agent heap (syncer + client)", "KiB"},
	{"bgp_round_kib", "one calico-node BGP read round", "KiB"},
	{"etcd_sync_cpu_s", "etcd CPU during the cold start", "s"},
	{"etcd_sync_mib", "etcd bytes sent during the cold start", "MiB"},
	{"etcd_watchers", "etcd watchers in sync", ""},
	{"cache_cpu_ms", "caches' CPU per change", "ms"},
	{"cache_rss_mb", "caches' RSS", "MiB"},
	{"cache_peak_mb", "caches' peak RSS", "MiB"},
}

// FanOutConfig shapes the etcd fan-out measurement.
type FanOutConfig struct {
	// Members is the etcd cluster's size (1 or 3).
	Members int
	// Cluster is the datastore's content apart from the node count.
	Cluster Cluster
	// Changes is how many policy changes and endpoint creations are timed.
	Changes int
	// Dir holds etcd's data directories (removed after each size); the
	// system's temporary directory when empty.
	Dir string
	// AgentsPerCache, when set, puts the fan-out cache between the
	// agents and etcd: one calico-etcd-proxy process per that many
	// agents (at least one), each agent connected to one of them.
	AgentsPerCache int
}

// seriesName is fanout-<members>m, or fanoutcache-<members>m with the
// cache.
func (cfg FanOutConfig) seriesName() string {
	if cfg.AgentsPerCache > 0 {
		return fmt.Sprintf("fanoutcache-%dm", cfg.Members)
	}
	return fmt.Sprintf("fanout-%dm", cfg.Members)
}

// FanOut measures, for each size n, n agents each running the syncer felix
// runs (calc.Syncer with its IPAM block source, one etcd connection each)
// against a fresh etcd holding an n-node cluster: the cold start of all of
// them at once, then how long a policy change and a new WorkloadEndpoint
// take to reach every agent (p50, p99 over all agents and changes), what
// etcd spends per change, and the agents' heap. bgp_round_kib is the
// bytes of one round of the lists calico-node's BGP speaker makes every
// poll interval (1 s), measured once on the same store.
func FanOut(ctx context.Context, sizes []int, cfg FanOutConfig) (Series, error) {
	s := Series{Name: cfg.seriesName(), Metrics: FanOutMetrics}
	for _, n := range sizes {
		p, err := fanOutOnce(ctx, n, cfg)
		if err != nil {
			// Larger sizes would fail the same way: say so and stop.
			s.Notes = append(s.Notes, fmt.Sprintf("%s: not measured at %d agents and above: %v", s.Name, n, err))
			log.WithError(err).WithField("n", n).Error("etcd fan-out failed")
			break
		}
		log.WithFields(log.Fields{"n": n, "values": p.Values}).Info("etcd fan-out measured")
		s.Points = append(s.Points, p)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("%s: %d etcd member(s), fsync on; %d pods per node, %d namespaces, %d policies; %d policy changes and %d new endpoints timed per size",
		s.Name, cfg.Members, cfg.Cluster.PodsPerNode, cfg.Cluster.Namespaces, cfg.Cluster.Policies, cfg.Changes, cfg.Changes))
	if cfg.AgentsPerCache > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: agents reach etcd through calico-etcd-proxy (etcd's gRPC proxy), one process per %d agents; the caches' CPU and RSS are theirs, etcd's columns etcd's alone",
			s.Name, cfg.AgentsPerCache))
	}
	return s, nil
}

// probe is one timed change: the agents record when they first see an
// update matching it.
type probe struct {
	match    func(calc.Update) bool
	start    time.Time
	arrivals []atomic.Int64 // ns after start, per agent; 0 = not yet
	left     atomic.Int64
	done     chan struct{}
}

func newProbe(n int, match func(calc.Update) bool) *probe {
	p := &probe{match: match, arrivals: make([]atomic.Int64, n), done: make(chan struct{})}
	p.left.Store(int64(n))
	return p
}

// agent is one simulated felix's syncer callbacks.
type agent struct {
	i      int
	cur    *atomic.Pointer[probe]
	synced chan<- int
}

func (a *agent) OnUpdates(us []calc.Update) {
	p := a.cur.Load()
	if p == nil {
		return
	}
	for _, u := range us {
		if p.match(u) && p.arrivals[a.i].CompareAndSwap(0, int64(time.Since(p.start))) {
			if p.left.Add(-1) == 0 {
				close(p.done)
			}
			return
		}
	}
}

func (a *agent) OnInSync() { a.synced <- a.i }

func fanOutOnce(ctx context.Context, n int, cfg FanOutConfig) (Point, error) {
	r, err := startRun(ctx, cfg.Dir, fmt.Sprintf("etcd-%d-", n), cfg.Members)
	if err != nil {
		return Point{}, err
	}
	defer r.stop()
	e, w := r.etcd, r.w
	c := cfg.Cluster
	c.Nodes = n
	if err := populate(ctx, w, c); err != nil {
		return Point{}, err
	}
	round, err := bgpRoundBytes(ctx, e, w)
	if err != nil {
		return Point{}, err
	}

	agentEndpoints := func(int) []string { return e.Endpoints }
	var caches []*cacheProc
	defer func() {
		for _, c := range caches {
			c.stop()
		}
	}()
	if cfg.AgentsPerCache > 0 {
		for range (n + cfg.AgentsPerCache - 1) / cfg.AgentsPerCache {
			c, err := startCache(ctx, e.Endpoints)
			if err != nil {
				return Point{}, err
			}
			caches = append(caches, c)
		}
		agentEndpoints = func(i int) []string { return []string{caches[i%len(caches)].endpoint} }
	}
	cacheUsage := func() (cpu, rss float64, err error) {
		for _, c := range caches {
			cc, err := ProcCPUSeconds(c.pid())
			if err != nil {
				return 0, 0, err
			}
			r, err := ProcRSSMiB(c.pid())
			if err != nil {
				return 0, 0, err
			}
			cpu, rss = cpu+cc, rss+r
		}
		return cpu, rss, nil
	}
	syncCPU0, _, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	syncSent0, err := e.SentBytes()
	if err != nil {
		return Point{}, err
	}

	heap0 := heapMiB()
	var cur atomic.Pointer[probe]
	synced := make(chan int, n)
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	stores := make([]*etcdv3.Store, n)
	defer func() {
		for _, st := range stores {
			if st != nil {
				st.Close()
			}
		}
	}()
	start := time.Now()
	errs := make(chan error, n)
	sem := make(chan struct{}, 64) // connections being set up at once
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			st, err := etcdv3.New(actx, etcdv3.Config{Endpoints: agentEndpoints(i), DialTimeout: 5 * time.Minute})
			<-sem
			if err != nil {
				errs <- fmt.Errorf("agent %d: %w", i, err)
				return
			}
			stores[i] = st
			sy := calc.NewSyncer(st, NodeName(i), &agent{i: i, cur: &cur, synced: synced})
			sy.Blocks = &calc.BlockSource{KV: st.KV(), Watcher: st}
			_ = sy.Run(actx)
		}()
	}
	for range n {
		select {
		case <-synced:
		case err := <-errs:
			return Point{}, err
		case <-time.After(5 * time.Minute):
			return Point{}, fmt.Errorf("agents not in sync within 5 minutes")
		}
	}
	syncAll := time.Since(start)
	syncCPU1, _, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	syncSent1, err := e.SentBytes()
	if err != nil {
		return Point{}, err
	}
	time.Sleep(time.Second) // let the start-up settle before timing changes
	agentHeap := (heapMiB() - heap0) * 1024 / float64(n)
	var watchers float64
	for _, ep := range e.Endpoints {
		v, err := metric(ep, "etcd_debugging_mvcc_watcher_total")
		if err != nil {
			return Point{}, err
		}
		watchers += v
	}

	cpu0, _, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	ccpu0, _, err := cacheUsage()
	if err != nil {
		return Point{}, err
	}
	sent0, err := e.SentBytes()
	if err != nil {
		return Point{}, err
	}
	timed := func(match func(calc.Update) bool, write func() error) ([]time.Duration, error) {
		p := newProbe(n, match)
		cur.Store(p)
		p.start = time.Now()
		if err := write(); err != nil {
			return nil, err
		}
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
			return nil, fmt.Errorf("a change reached %d of %d agents in 2 minutes", int64(n)-p.left.Load(), n)
		}
		cur.Store(nil)
		out := make([]time.Duration, n)
		for i := range p.arrivals {
			out[i] = time.Duration(p.arrivals[i].Load())
		}
		return out, nil
	}
	var pols, weps []time.Duration
	for k := range cfg.Changes {
		want := c.Policy(0, k+1)
		port := want.Spec.Ingress[0].Destination.Ports[0]
		d, err := timed(func(u calc.Update) bool {
			np, ok := u.Value.(*v3.NetworkPolicy)
			return ok && np.Name == want.Name && np.Namespace == want.Namespace &&
				len(np.Spec.Ingress) > 0 && len(np.Spec.Ingress[0].Destination.Ports) > 0 && np.Spec.Ingress[0].Destination.Ports[0] == port
		}, func() error { _, err := w.Apply(ctx, want); return err })
		if err != nil {
			return Point{}, fmt.Errorf("policy change %d: %w", k, err)
		}
		pols = append(pols, d...)
		time.Sleep(200 * time.Millisecond)
	}
	for k := range cfg.Changes {
		ep := c.Endpoint(k%n, c.PodsPerNode+k, 0) // a pod the node did not have
		key := datastore.KeyOf(ep)
		d, err := timed(func(u calc.Update) bool { return u.Key == key && u.Value != nil },
			func() error { _, err := w.Create(ctx, ep); return err })
		if err != nil {
			return Point{}, fmt.Errorf("endpoint creation %d: %w", k, err)
		}
		weps = append(weps, d...)
		time.Sleep(200 * time.Millisecond)
	}
	cpu1, rss, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	sent1, err := e.SentBytes()
	if err != nil {
		return Point{}, err
	}
	ccpu1, crss, err := cacheUsage()
	if err != nil {
		return Point{}, err
	}
	changes := float64(2 * cfg.Changes)
	values := map[string]float64{
		"sync_all_s":    syncAll.Seconds(),
		"policy_p50_ms": quantileMs(pols, 0.50), "policy_p99_ms": quantileMs(pols, 0.99),
		"wep_p50_ms": quantileMs(weps, 0.50), "wep_p99_ms": quantileMs(weps, 0.99),
		"etcd_cpu_ms": (cpu1 - cpu0) * 1000 / changes, "etcd_kib": (sent1 - sent0) / 1024 / changes,
		"etcd_rss_mb": rss, "agent_kib": agentHeap, "bgp_round_kib": round / 1024,
		"etcd_sync_cpu_s": syncCPU1 - syncCPU0, "etcd_sync_mib": (syncSent1 - syncSent0) / (1 << 20),
		"etcd_watchers": watchers,
	}
	if len(caches) > 0 {
		values["cache_cpu_ms"] = (ccpu1 - ccpu0) * 1000 / changes
		values["cache_rss_mb"] = crss
		for _, c := range caches {
			peak, err := ProcPeakRSSMiB(c.pid())
			if err != nil {
				return Point{}, err
			}
			values["cache_peak_mb"] += peak
		}
	}
	return Point{N: n, Values: values}, nil
}

// quantileMs is the q-quantile of ds in milliseconds (nearest rank).
func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / float64(time.Millisecond)
}

// populate writes cluster c into the store: profiles, policies, nodes,
// endpoints, the pool and each node's block affinity and block (through
// the IPAM allocator, as the nodes' first CNI ADD would).
func populate(ctx context.Context, w *etcdv3.Store, c Cluster) error {
	var rs []v3.Resource
	rs = append(rs, &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "default-ipv4-ippool"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 26}})
	for i := range c.Namespaces {
		rs = append(rs, c.Profile(i))
	}
	for k := range c.Policies {
		rs = append(rs, c.Policy(k, 0))
	}
	for i := range c.Nodes {
		rs = append(rs, c.Node(i, nodeAddr(i)))
		for j := range c.PodsPerNode {
			rs = append(rs, c.Endpoint(i, j, 0))
		}
	}
	if err := parallelDo(16, len(rs), func(k int) error {
		_, err := w.Create(ctx, rs[k])
		return err
	}); err != nil {
		return fmt.Errorf("populating the datastore: %w", err)
	}
	alloc := ipam.New(w, w.KV())
	if err := parallelDo(16, c.Nodes, func(i int) error {
		_, _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: c.PodsPerNode, Hostname: NodeName(i),
			HandleID: "k8s-pod-network." + NodeName(i)})
		return err
	}); err != nil {
		return fmt.Errorf("claiming the nodes' blocks: %w", err)
	}
	return nil
}

// parallelDo runs fn(0..n-1) on at most workers goroutines and returns
// the first error.
func parallelDo(workers, n int, fn func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				if err := fn(k); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// bgpRoundBytes measures the bytes etcd sends for one round of the lists
// node/bgp's read makes every poll interval on every node: Nodes,
// BGPPeers, BGPConfigurations, IPPools, BGPFilters, WorkloadEndpoints and
// the IPAM affinities and blocks.
func bgpRoundBytes(ctx context.Context, e *Etcd, w *etcdv3.Store) (float64, error) {
	before, err := e.SentBytes()
	if err != nil {
		return 0, err
	}
	for _, kind := range []string{v3.KindNode, v3.KindBGPPeer, v3.KindBGPConfiguration, v3.KindIPPool, v3.KindBGPFilter, v3.KindWorkloadEndpoint} {
		if _, _, err := w.List(ctx, datastore.ListOptions{Kind: kind}); err != nil {
			return 0, fmt.Errorf("listing %s: %w", kind, err)
		}
	}
	alloc := ipam.New(w, w.KV())
	if _, err := alloc.ListAffinities(ctx); err != nil {
		return 0, err
	}
	if _, err := alloc.ListBlocks(ctx); err != nil {
		return 0, err
	}
	after, err := e.SentBytes()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}
