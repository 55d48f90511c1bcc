package scale

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// IPAMMetrics are the values IPAMStorm reports.
var IPAMMetrics = []Metric{
	{"storm_s", "all nodes have their addresses", "s"},
	{"node_p50_s", "one node's addresses p50", "s"},
	{"node_p99_s", "one node's addresses p99", "s"},
	{"conflicts", "write conflicts retried", ""},
	{"conflicts_per_node", "conflicts per node", ""},
	{"blocks", "blocks claimed", ""},
	{"borrowed", "addresses outside the node's blocks", ""},
	{"duplicates", "duplicate addresses", ""},
	{"etcd_cpu_s", "etcd CPU", "s"},
}

// errDuplicate fails the storm: an address was handed out twice.
var errDuplicate = errors.New("handed out twice")

// StormPods is how many addresses each node allocates in the storm.
const StormPods = 30

// IPAMStorm measures, at each size n, n nodes starting at once against a
// fresh etcd: each with its own connection and allocator assigns
// StormPods addresses one CNI ADD at a time (claiming its first block on
// the way). It reports how long until every node has them, the write
// conflicts the allocator met and retried (counted at its datastore
// interface), the blocks claimed and, read back from the blocks, how many
// addresses were handed out twice (which fails the measurement).
func IPAMStorm(ctx context.Context, sizes []int, dir string) (Series, error) {
	s := Series{Name: "ipam", Metrics: IPAMMetrics}
	for _, n := range sizes {
		p, err := stormOnce(ctx, n, dir)
		if errors.Is(err, errDuplicate) {
			return s, fmt.Errorf("IPAM storm of %d nodes: %w", n, err)
		}
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("ipam: not measured at %d nodes and above: %v", n, err))
			log.WithError(err).Error("IPAM storm failed")
			break
		}
		log.WithFields(log.Fields{"n": n, "values": p.Values}).Info("IPAM storm measured")
		s.Points = append(s.Points, p)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("ipam: pool 10.0.0.0/8 with /26 blocks; %d sequential single-address assignments per node, all nodes at once, one etcd member", StormPods))
	return s, nil
}

// countingKV counts the conflicts (a compare-and-swap that lost, a key
// taken) the allocator meets.
type countingKV struct {
	datastore.KV
	conflicts *atomic.Int64
}

func (c countingKV) count(err error) {
	if errors.Is(err, datastore.ErrConflict) || errors.Is(err, datastore.ErrAlreadyExists) {
		c.conflicts.Add(1)
	}
}

func (c countingKV) Create(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	out, err := c.KV.Create(ctx, p)
	c.count(err)
	return out, err
}

func (c countingKV) Update(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	out, err := c.KV.Update(ctx, p)
	c.count(err)
	return out, err
}

func (c countingKV) Delete(ctx context.Context, key string, revision int64) error {
	err := c.KV.Delete(ctx, key, revision)
	c.count(err)
	return err
}

func (c countingKV) Txn(ctx context.Context, conds []datastore.KVCond, ops []datastore.KVOp) (int64, []datastore.KVPair, error) {
	rev, cur, err := c.KV.Txn(ctx, conds, ops)
	c.count(err)
	return rev, cur, err
}

func stormOnce(ctx context.Context, n int, dir string) (Point, error) {
	r, err := startRun(ctx, dir, fmt.Sprintf("ipam-%d-", n), 1)
	if err != nil {
		return Point{}, err
	}
	defer r.stop()
	e, w := r.etcd, r.w
	rs := []v3.Resource{&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "default-ipv4-ippool"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 26}}}
	for i := range n {
		rs = append(rs, Cluster{}.Node(i, nodeAddr(i)))
	}
	if err := parallelDo(16, len(rs), func(k int) error { _, err := w.Create(ctx, rs[k]); return err }); err != nil {
		return Point{}, fmt.Errorf("writing the pool and nodes: %w", err)
	}
	stores := make([]*etcdv3.Store, n)
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	}()
	// Connections first (a node's agent is up before its pods start).
	if err := parallelDo(64, n, func(i int) error {
		var err error
		stores[i], err = etcdv3.New(ctx, etcdv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Minute})
		return err
	}); err != nil {
		return Point{}, err
	}
	var conflicts atomic.Int64
	cpu0, _, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	took := make([]time.Duration, n)
	got := make([][]netip.Addr, n)
	start := time.Now()
	if err := parallelDo(n, n, func(i int) error {
		a := ipam.New(stores[i], countingKV{KV: stores[i].KV(), conflicts: &conflicts})
		for j := range StormPods {
			v4, _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, Hostname: NodeName(i),
				HandleID: fmt.Sprintf("k8s-pod-network.%d-%d", i, j)})
			if err != nil {
				return fmt.Errorf("node %d pod %d: %w", i, j, err)
			}
			for _, ip := range v4.IPs {
				got[i] = append(got[i], ip.Addr())
			}
		}
		took[i] = time.Since(start)
		return nil
	}); err != nil {
		return Point{}, err
	}
	storm := time.Since(start)
	cpu1, _, err := e.Usage()
	if err != nil {
		return Point{}, err
	}
	blocks, err := ipam.New(w, w.KV()).ListBlocks(ctx)
	if err != nil {
		return Point{}, err
	}
	owner := map[netip.Addr]string{} // from the blocks, as calicoctl ipam check reads them
	dups, total := 0, 0
	own := map[string][]netip.Prefix{}
	for _, b := range blocks {
		own[b.Host] = append(own[b.Host], b.CIDR)
		for _, al := range b.Allocations {
			total++
			if _, ok := owner[al.IP]; ok {
				dups++
			}
			owner[al.IP] = al.HandleID
		}
	}
	seen := map[netip.Addr]bool{}
	borrowed := 0
	for i, ips := range got {
		for _, ip := range ips {
			if seen[ip] {
				dups++
			}
			seen[ip] = true
			if !slices.ContainsFunc(own[NodeName(i)], func(p netip.Prefix) bool { return p.Contains(ip) }) {
				borrowed++
			}
		}
	}
	if dups > 0 {
		return Point{}, fmt.Errorf("%d addresses: %w", dups, errDuplicate)
	}
	if want := n * StormPods; total != want || len(seen) != want {
		return Point{}, fmt.Errorf("%d addresses in the blocks and %d returned, want %d", total, len(seen), want)
	}
	slices.Sort(took)
	q := func(f float64) float64 {
		return took[max(0, min(len(took)-1, int(f*float64(len(took))+0.5)-1))].Seconds()
	}
	return Point{N: n, Values: map[string]float64{
		"storm_s": storm.Seconds(), "node_p50_s": q(0.5), "node_p99_s": q(0.99),
		"conflicts": float64(conflicts.Load()), "conflicts_per_node": float64(conflicts.Load()) / float64(n),
		"blocks": float64(len(blocks)), "borrowed": float64(borrowed), "duplicates": float64(dups),
		"etcd_cpu_s": cpu1 - cpu0,
	}}, nil
}
