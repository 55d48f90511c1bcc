package scale

import (
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// CalcMetrics are the values CalcGraph reports.
var CalcMetrics = []Metric{
	{"sync_s", "first sync", "s"},
	{"heap_mb", "graph heap", "MiB"},
	{"per_remote_kib", "heap per remote endpoint", "KiB"},
	{"churn_us", "remote pod churn", "µs"},
	{"churn_msgs", "dataplane messages per churn", ""},
	{"churn_shared_us", "churn of a pod in a local pod's namespace", "µs"},
	{"churn_shared_msgs", "its dataplane messages", ""},
	{"policies_active", "active policies", ""},
	{"ipsets", "IP sets", ""},
}

// CalcSetup is the cluster the calculation graph is measured in, apart
// from its node count: 30 pods per node, 1,000 namespaces and 10,000
// NetworkPolicies, as issue 31 asks.
var CalcSetup = Cluster{PodsPerNode: 30, Namespaces: 1000, Policies: 10000}

// CalcGraph builds, for each size, the calculation graph of node-0 in a
// cluster of that many nodes (CalcSetup otherwise), feeds it the whole
// datastore in the syncer's batches, and reports the first sync's time,
// the heap the graph keeps afterwards (inputs dropped, after GC), the heap
// per remote endpoint (over a one-node cluster's graph), and the cost of
// one remote pod's label change (mean over churns changes, each flushed).
func CalcGraph(sizes []int, setup Cluster, churns int) (Series, error) {
	s := Series{Name: "calc", Metrics: CalcMetrics}
	base, err := calcOnce(1, setup, 0)
	if err != nil {
		return s, err
	}
	for _, n := range sizes {
		p, err := calcOnce(n, setup, churns)
		if err != nil {
			return s, err
		}
		remote := float64((n - 1) * setup.PodsPerNode)
		if remote > 0 {
			p.Values["per_remote_kib"] = (p.Values["heap_mb"] - base.Values["heap_mb"]) * 1024 / remote
		}
		s.Points = append(s.Points, p)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("calc: %d pods per node, %d namespaces, %d NetworkPolicies; heap per remote endpoint is over a one-node cluster's graph (%.1f MiB)",
		setup.PodsPerNode, setup.Namespaces, setup.Policies, base.Values["heap_mb"]))
	return s, nil
}

// heapMiB is the live heap after a full collection.
func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

func calcOnce(n int, setup Cluster, churns int) (Point, error) {
	c := setup
	c.Nodes = n
	before := heapMiB()
	in := calcInput(c)
	dp := &countingDataplane{}
	g := calc.NewGraph(NodeName(0), dp)
	start := time.Now()
	for len(in) > 0 { // the syncer's MaxBatch
		k := min(len(in), 1000)
		g.OnUpdates(in[:k])
		in = in[k:]
	}
	g.OnInSync()
	g.Flush()
	sync := time.Since(start)
	if dp.endpoints != c.PodsPerNode {
		return Point{}, fmt.Errorf("calc graph of %d nodes: %d local endpoints sent, want %d", n, dp.endpoints, c.PodsPerNode)
	}
	in = nil
	heap := heapMiB() - before
	p := Point{N: n, Values: map[string]float64{"sync_s": sync.Seconds(), "heap_mb": heap,
		"policies_active": float64(dp.policies), "ipsets": float64(dp.sets)}}
	if churns > 0 && n > 1 {
		msgs := dp.msgs
		start = time.Now()
		for r := range churns {
			node := 1 + r%(n-1)
			w := c.Endpoint(node, (r/(n-1))%c.PodsPerNode, r+1)
			g.OnUpdates([]calc.Update{{Key: datastore.KeyOf(w), Value: w}})
			g.Flush()
		}
		p.Values["churn_us"] = float64(time.Since(start).Microseconds()) / float64(churns)
		p.Values["churn_msgs"] = float64(dp.msgs-msgs) / float64(churns)
		// Pods that share a namespace with a local pod (ns-0 holds
		// node-0's pod 0): their labels are in IP sets node-0 uses.
		var shared [][2]int
		for seq := c.Namespaces; seq < n*c.PodsPerNode; seq += c.Namespaces {
			shared = append(shared, [2]int{seq / c.PodsPerNode, seq % c.PodsPerNode})
		}
		if len(shared) > 0 {
			msgs = dp.msgs
			start = time.Now()
			for r := range churns {
				ij := shared[r%len(shared)]
				w := c.Endpoint(ij[0], ij[1], r+1)
				g.OnUpdates([]calc.Update{{Key: datastore.KeyOf(w), Value: w}})
				g.Flush()
			}
			p.Values["churn_shared_us"] = float64(time.Since(start).Microseconds()) / float64(churns)
			p.Values["churn_shared_msgs"] = float64(dp.msgs-msgs) / float64(churns)
		}
	}
	runtime.KeepAlive(g)
	return p, nil
}

// calcInput is the whole datastore of c in the order a syncer's first
// list delivers it (kind by kind).
func calcInput(c Cluster) []calc.Update {
	var out []calc.Update
	add := func(r v3.Resource) { out = append(out, calc.Update{Key: datastore.KeyOf(r), Value: r}) }
	for i := range c.Namespaces {
		add(c.Profile(i))
	}
	for k := range c.Policies {
		add(c.Policy(k, 0))
	}
	for i := range c.Nodes {
		add(c.Node(i, nodeAddr(i)))
	}
	for i := range c.Nodes {
		for j := range c.PodsPerNode {
			add(c.Endpoint(i, j, 0))
		}
	}
	return out
}

// nodeAddr is node i's address in 198.18.0.0/15 (never used for traffic
// by the calculation and etcd measurements).
func nodeAddr(i int) netip.Addr {
	n := uint32(198)<<24 | uint32(18)<<16 + uint32(i+1)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// countingDataplane receives the graph's output and only counts it.
type countingDataplane struct{ sets, policies, endpoints, msgs int }

func (c *countingDataplane) OnConfigUpdate(*calc.Config)             { c.msgs++ }
func (c *countingDataplane) OnIPSetUpdate(*calc.IPSet)               { c.msgs++; c.sets++ }
func (c *countingDataplane) OnIPSetDelta(string, []string, []string) { c.msgs++ }
func (c *countingDataplane) OnIPSetRemoved(string)                   { c.msgs++ }
func (c *countingDataplane) OnPolicyUpdate(*calc.Policy)             { c.msgs++; c.policies++ }
func (c *countingDataplane) OnPolicyRemoved(calc.PolicyID)           { c.msgs++ }
func (c *countingDataplane) OnProfileUpdate(*calc.Profile)           { c.msgs++ }
func (c *countingDataplane) OnProfileRemoved(string)                 { c.msgs++ }
func (c *countingDataplane) OnEndpointUpdate(*calc.Endpoint)         { c.msgs++; c.endpoints++ }
func (c *countingDataplane) OnEndpointRemoved(calc.EndpointID)       { c.msgs++ }
func (c *countingDataplane) OnRouteUpdate(calc.Route)                { c.msgs++ }
func (c *countingDataplane) OnRouteRemoved(netip.Prefix)             { c.msgs++ }
func (c *countingDataplane) OnInSync()                               { c.msgs++ }
