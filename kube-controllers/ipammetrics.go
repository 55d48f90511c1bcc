package kubecontrollers

import (
	"context"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// ipamCollector reads IPAM at each scrape, on the leader only (the
// replica whose node controller garbage-collects), with Calico's
// kube-controllers metric names.
type ipamCollector struct {
	store  datastore.Interface
	alloc  *ipam.Allocator
	leader func() bool
}

// noPool labels blocks no IP pool contains (left by a deleted pool).
const noPool = "no_ippool"

var (
	ipamInUseDesc = prometheus.NewDesc("ipam_allocations_in_use",
		"Number of Calico IP allocations currently in use by a workload or interface.", []string{"ippool", "node"}, nil)
	ipamBorrowedDesc = prometheus.NewDesc("ipam_allocations_borrowed",
		"Number of Calico IP allocations in use where the allocation was borrowed from a block affine to another node.", []string{"ippool", "node"}, nil)
	ipamBlocksDesc   = prometheus.NewDesc("ipam_blocks", "Number of IPAM blocks, by the node they are affine to.", []string{"ippool", "node"}, nil)
	ipamPoolSizeDesc = prometheus.NewDesc("ipam_ippool_size", "Number of IP addresses in the IP pool's CIDR.", []string{"ippool"}, nil)
)

// Describe implements prometheus.Collector.
func (c ipamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ipamInUseDesc
	ch <- ipamBorrowedDesc
	ch <- ipamBlocksDesc
	ch <- ipamPoolSizeDesc
}

type poolNode struct{ pool, node string }

// Collect implements prometheus.Collector.
func (c ipamCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.leader() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pools, err := poolCIDRs(ctx, c.store)
	if err != nil {
		log.WithError(err).Warn("IPAM metrics: listing IP pools")
		return
	}
	blocks, err := c.alloc.ListBlocks(ctx)
	if err != nil {
		log.WithError(err).Warn("IPAM metrics: listing IPAM blocks")
		return
	}
	inUse, borrowed, nblocks := map[poolNode]int{}, map[poolNode]int{}, map[poolNode]int{}
	for _, b := range blocks {
		pool := poolOf(pools, b.CIDR)
		nblocks[poolNode{pool, b.Host}]++
		for _, a := range b.Allocations {
			node := a.Attrs["node"]
			if node == "" {
				node = b.Host
			}
			inUse[poolNode{pool, node}]++
			if node != b.Host {
				borrowed[poolNode{pool, node}]++
			}
		}
	}
	emit := func(d *prometheus.Desc, m map[poolNode]int) {
		for k, n := range m {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), k.pool, k.node)
		}
	}
	emit(ipamInUseDesc, inUse)
	emit(ipamBorrowedDesc, borrowed)
	emit(ipamBlocksDesc, nblocks)
	for name, cidr := range pools {
		size := 1 << min(cidr.Addr().BitLen()-cidr.Bits(), 62)
		ch <- prometheus.MustNewConstMetric(ipamPoolSizeDesc, prometheus.GaugeValue, float64(size), name)
	}
}

// poolCIDRs lists the IP pools by name.
func poolCIDRs(ctx context.Context, store datastore.Interface) (map[string]netip.Prefix, error) {
	items, _, err := store.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Prefix{}
	for _, r := range items {
		p, ok := r.(*v3.IPPool)
		if !ok {
			continue
		}
		if cidr, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
			out[p.Name] = cidr.Masked()
		}
	}
	return out, nil
}

// poolOf names the pool containing cidr.
func poolOf(pools map[string]netip.Prefix, cidr netip.Prefix) string {
	for name, p := range pools {
		if p.Bits() <= cidr.Bits() && p.Contains(cidr.Addr()) {
			return name
		}
	}
	return noPool
}
