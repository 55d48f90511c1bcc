// Package paths computes, purely from resources and IPAM, the routes one
// node originates over BGP: its confirmed pod blocks (in pools exported
// over BGP), a host route for each address it holds in another node's
// block (a borrowed address) and for each floating IP of its workloads,
// and the cluster's service ranges, with the
// communities BGPConfiguration attaches to them; and the blackhole routes
// that stand for its blocks in its own kernel.
package paths

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// Kind says why a path is advertised.
type Kind string

// The path kinds.
const (
	KindBlock    Kind = "block"
	KindBorrowed Kind = "borrowed"
	KindService  Kind = "service"
	// KindFloating is a floating IP (a WorkloadEndpoint's ipNATs
	// externalIP) of a workload on this node.
	KindFloating Kind = "floating"
	// KindWorkload is the address of a workload on this node that no
	// IPAM block holds (host-local IPAM, usePodCidr), in an exported
	// pool: Calico's BIRD learns felix's route to it and exports it.
	KindWorkload Kind = "workload"
	// KindServiceIP is one Service address (a /32 or /128): a Service
	// with a Local traffic policy from a node holding a ready endpoint
	// of it, or a LoadBalancer address with aggregation Disabled.
	KindServiceIP Kind = "service-ip"
)

// Path is one route this node originates.
type Path struct {
	Prefix  netip.Prefix `json:"prefix"`
	NextHop netip.Addr   `json:"nextHop"`
	Kind    Kind         `json:"kind"`
	// Communities are standard communities (aa<<16 | nn).
	Communities []uint32 `json:"communities,omitempty"`
	// LargeCommunities are (global, local1, local2) triples.
	LargeCommunities [][3]uint32 `json:"largeCommunities,omitempty"`
}

// MarshalJSON writes communities as BGPConfiguration spells them
// ("65000:100", "65000:1:2"), so golden files and diagnostics read well.
func (p Path) MarshalJSON() ([]byte, error) {
	type plain Path
	out := struct {
		plain
		Communities      []string `json:"communities,omitempty"`
		LargeCommunities []string `json:"largeCommunities,omitempty"`
	}{plain: plain(p)}
	for _, c := range p.Communities {
		out.Communities = append(out.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
	}
	for _, l := range p.LargeCommunities {
		out.LargeCommunities = append(out.LargeCommunities, fmt.Sprintf("%d:%d:%d", l[0], l[1], l[2]))
	}
	return json.Marshal(out)
}

// Key identifies a path by its prefix.
func (p Path) Key() netip.Prefix { return p.Prefix }

// Equal reports whether two paths carry the same attributes.
func (p Path) Equal(o Path) bool {
	if p.Prefix != o.Prefix || p.NextHop != o.NextHop || p.Kind != o.Kind ||
		len(p.Communities) != len(o.Communities) || len(p.LargeCommunities) != len(o.LargeCommunities) {
		return false
	}
	for i := range p.Communities {
		if p.Communities[i] != o.Communities[i] {
			return false
		}
	}
	for i := range p.LargeCommunities {
		if p.LargeCommunities[i] != o.LargeCommunities[i] {
			return false
		}
	}
	return true
}

// Input is everything the originated paths depend on.
type Input struct {
	NodeName string
	// IPv4 and IPv6 are the node's BGP addresses (next hops); a family
	// without an address originates nothing.
	IPv4, IPv6 netip.Addr
	// Affinities are block affinities (any node's; only NodeName's
	// confirmed ones count).
	Affinities []ipam.Affinity
	// Blocks are the allocation blocks with their allocations; an
	// allocation's "node" attribute names the node holding the address.
	Blocks []ipam.Block
	Pools  []v3.IPPool
	Config *v3.BGPConfigurationSpec
	// Floating are the floating IPs of the cluster's workloads;
	// FloatingEnabled says this node's felix programs them (FelixConfiguration
	// floatingIPs Enabled, not eBPF): only then are NodeName's advertised.
	Floating        []Floating
	FloatingEnabled bool
	// Workloads are the addresses of the cluster's WorkloadEndpoints
	// (their ipNetworks), with their nodes.
	Workloads []Floating
	// Services are the cluster's Kubernetes Services, as far as
	// advertisement needs them; only read when Config names service
	// CIDRs.
	Services []Service
}

// Floating is a floating IP and the node of the workload it goes to.
type Floating struct {
	Node string
	Addr netip.Addr
}

// Service is one Kubernetes Service as seen from NodeName.
type Service struct {
	// Name is namespace/name, for errors and diagnostics.
	Name                                     string
	ClusterIPs, ExternalIPs, LoadBalancerIPs []netip.Addr
	// ExternalLocal is externalTrafficPolicy Local; InternalLocal is
	// internalTrafficPolicy Local.
	ExternalLocal, InternalLocal bool
	// LocalEndpoint says NodeName holds a ready endpoint of the Service;
	// AnyEndpoint that some node does.
	LocalEndpoint, AnyEndpoint bool
}

// Result is the originated paths and the local blackholes, each sorted.
type Result struct {
	Paths []Path `json:"paths"`
	// Blackholes are this node's blocks, to be installed as blackhole
	// routes so traffic to unallocated addresses dies here.
	Blackholes []netip.Prefix `json:"blackholes"`
	// Blocks are this node's blocks (whatever their pool), never to be
	// imported from peers...
	Blocks []netip.Prefix `json:"blocks"`
	// ...except the host routes of Lent: addresses of this node's blocks
	// that other nodes hold (they advertise them).
	Lent []netip.Prefix `json:"lent,omitempty"`
	// FelixOwned are the CIDRs of VXLAN pools (vxlanMode Always or
	// CrossSubnet): their blocks are still advertised, as Calico's BIRD
	// does, but routes learned inside them are never programmed into the
	// kernel — felix routes them (Calico's calico_kernel_programming
	// filter rejects them the same way).
	FelixOwned []netip.Prefix `json:"felixOwned,omitempty"`
}

// Compute returns the node's paths. Invalid service CIDRs or communities
// are reported and skipped.
func Compute(in Input) (Result, []error) {
	var res Result
	var errs []error
	type pool struct {
		cidr     netip.Prefix
		noExport bool
	}
	var pools []pool
	for _, p := range in.Pools {
		c, err := netip.ParsePrefix(p.Spec.CIDR)
		if err != nil {
			errs = append(errs, fmt.Errorf("ippool %q: spec.cidr %q: %w", p.Name, p.Spec.CIDR, err))
			continue
		}
		pools = append(pools, pool{c.Masked(), p.Spec.DisableBGPExport})
		if p.Spec.VXLANMode == v3.EncapAlways || p.Spec.VXLANMode == v3.EncapCrossSubnet {
			res.FelixOwned = append(res.FelixOwned, c.Masked())
		}
	}
	comms, cerrs := communityTable(in.Config)
	errs = append(errs, cerrs...)

	seen := map[netip.Prefix]bool{}
	add := func(pfx netip.Prefix, kind Kind) {
		nh := in.IPv4
		if pfx.Addr().Is6() {
			nh = in.IPv6
		}
		if !nh.IsValid() || seen[pfx] {
			return
		}
		seen[pfx] = true
		p := Path{Prefix: pfx, NextHop: nh, Kind: kind}
		comms.apply(&p)
		res.Paths = append(res.Paths, p)
	}

	// exported says whether the most specific pool holding pfx allows
	// export (a prefix in no pool is not exported).
	exported := func(pfx netip.Prefix) bool {
		best := -1
		for i, p := range pools {
			if p.cidr.Bits() <= pfx.Bits() && p.cidr.Contains(pfx.Addr()) && (best < 0 || p.cidr.Bits() > pools[best].cidr.Bits()) {
				best = i
			}
		}
		return best >= 0 && !pools[best].noExport
	}
	mine := map[netip.Prefix]bool{}
	claimed := map[netip.Prefix]bool{}
	for _, a := range in.Affinities {
		if a.Host != in.NodeName {
			continue
		}
		claimed[a.CIDR.Masked()] = true
		if a.State != ipam.AffinityConfirmed {
			continue
		}
		blk := a.CIDR.Masked()
		mine[blk] = true
		res.Blocks = append(res.Blocks, blk)
		res.Blackholes = append(res.Blackholes, blk)
		if exported(blk) {
			add(blk, KindBlock)
		}
	}
	// Addresses in blocks that are not ours: a host route for those this
	// node holds; those other nodes hold in our blocks are theirs to
	// advertise.
	for _, b := range in.Blocks {
		blk := b.CIDR.Masked()
		for _, al := range b.Allocations {
			holder := al.Attrs["node"]
			host := netip.PrefixFrom(al.IP, al.IP.BitLen())
			switch {
			case holder == "":
			case mine[blk] && holder != in.NodeName:
				res.Lent = append(res.Lent, host)
			case !claimed[blk] && holder == in.NodeName && exported(host):
				add(host, KindBorrowed)
			}
		}
	}
	// Floating IPs: a host route from the node of their workload (in an
	// exported pool, as borrowed addresses); one of another node's in a
	// block of ours is theirs to advertise.
	for _, f := range in.Floating {
		host := netip.PrefixFrom(f.Addr.Unmap(), f.Addr.Unmap().BitLen())
		switch {
		case f.Node == in.NodeName:
			if in.FloatingEnabled && exported(host) {
				add(host, KindFloating)
			}
		case slices.ContainsFunc(res.Blocks, func(b netip.Prefix) bool { return b.Contains(host.Addr()) }):
			if !slices.Contains(res.Lent, host) {
				res.Lent = append(res.Lent, host)
			}
		}
	}
	// Workload addresses outside every IPAM block (host-local IPAM): a
	// host route from the workload's node, in an exported pool.
	inBlock := func(a netip.Addr) bool {
		return slices.ContainsFunc(in.Blocks, func(b ipam.Block) bool { return b.CIDR.Contains(a) }) ||
			slices.ContainsFunc(res.Blocks, func(b netip.Prefix) bool { return b.Contains(a) })
	}
	for _, w := range in.Workloads {
		a := w.Addr.Unmap()
		if host := netip.PrefixFrom(a, a.BitLen()); w.Node == in.NodeName && !inBlock(a) && exported(host) {
			add(host, KindWorkload)
		}
	}
	if c := in.Config; c != nil {
		errs = append(errs, servicePaths(c, in.Services, add)...)
	}
	sort.Slice(res.Paths, func(i, j int) bool { return prefixLess(res.Paths[i].Prefix, res.Paths[j].Prefix) })
	sort.Slice(res.Blackholes, func(i, j int) bool { return prefixLess(res.Blackholes[i], res.Blackholes[j]) })
	sort.Slice(res.Blocks, func(i, j int) bool { return prefixLess(res.Blocks[i], res.Blocks[j]) })
	sort.Slice(res.FelixOwned, func(i, j int) bool { return prefixLess(res.FelixOwned[i], res.FelixOwned[j]) })
	sort.Slice(res.Lent, func(i, j int) bool { return prefixLess(res.Lent[i], res.Lent[j]) })
	return res, errs
}

// servicePaths adds the service ranges BGPConfiguration names and the
// single Service addresses: an address of a Service with a Local traffic
// policy (externalTrafficPolicy for every address, internalTrafficPolicy
// for cluster IPs) only while this node holds a ready endpoint, and with
// serviceLoadBalancerAggregation Disabled every LoadBalancer address (of
// a Service with a ready endpoint somewhere) in place of the LoadBalancer
// ranges. An address in no configured range of
// its kind is not advertised.
func servicePaths(c *v3.BGPConfigurationSpec, svcs []Service, add func(netip.Prefix, Kind)) []error {
	var errs []error
	parse := func(field string, cidrs []string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range cidrs {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("bgpconfiguration: %s: service CIDR %q: %w", field, s, err))
				continue
			}
			out = append(out, pfx.Masked())
		}
		return out
	}
	var cl, ex, lb []string
	for _, s := range c.ServiceClusterIPs {
		cl = append(cl, s.CIDR)
	}
	for _, s := range c.ServiceExternalIPs {
		ex = append(ex, s.CIDR)
	}
	for _, s := range c.ServiceLoadBalancerIPs {
		lb = append(lb, s.CIDR)
	}
	clusterCIDRs := parse("serviceClusterIPs", cl)
	externalCIDRs := parse("serviceExternalIPs", ex)
	lbCIDRs := parse("serviceLoadBalancerIPs", lb)
	aggregate := c.ServiceLoadBalancerAggregation == nil || *c.ServiceLoadBalancerAggregation != "Disabled"
	for _, p := range clusterCIDRs {
		add(p, KindService)
	}
	for _, p := range externalCIDRs {
		add(p, KindService)
	}
	if aggregate {
		for _, p := range lbCIDRs {
			add(p, KindService)
		}
	}
	within := func(a netip.Addr, cidrs []netip.Prefix) bool {
		for _, p := range cidrs {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()) }
	for _, s := range svcs {
		for _, a := range s.ClusterIPs {
			if (s.ExternalLocal || s.InternalLocal) && s.LocalEndpoint && within(a, clusterCIDRs) {
				add(host(a), KindServiceIP)
			}
		}
		for _, a := range s.ExternalIPs {
			if s.ExternalLocal && s.LocalEndpoint && within(a, externalCIDRs) {
				add(host(a), KindServiceIP)
			}
		}
		for _, a := range s.LoadBalancerIPs {
			if !within(a, lbCIDRs) {
				continue
			}
			if s.ExternalLocal {
				if s.LocalEndpoint {
					add(host(a), KindServiceIP)
				}
			} else if !aggregate && s.AnyEndpoint {
				add(host(a), KindServiceIP)
			}
		}
	}
	return errs
}

func prefixLess(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// communities maps prefixAdvertisements to parsed communities.
type communities []struct {
	cidr  netip.Prefix
	std   []uint32
	large [][3]uint32
}

// apply attaches the communities of every prefixAdvertisement whose CIDR
// holds the path's prefix, in order, each value once.
func (cs communities) apply(p *Path) {
	for _, c := range cs {
		if c.cidr.Bits() > p.Prefix.Bits() || !c.cidr.Contains(p.Prefix.Addr()) {
			continue
		}
		for _, v := range c.std {
			if !slices.Contains(p.Communities, v) {
				p.Communities = append(p.Communities, v)
			}
		}
		for _, v := range c.large {
			if !slices.Contains(p.LargeCommunities, v) {
				p.LargeCommunities = append(p.LargeCommunities, v)
			}
		}
	}
}

// communityTable parses BGPConfiguration's named communities and prefix
// advertisements.
func communityTable(c *v3.BGPConfigurationSpec) (communities, []error) {
	if c == nil {
		return nil, nil
	}
	var errs []error
	named := map[string]string{}
	for _, n := range c.Communities {
		named[n.Name] = n.Value
	}
	var out communities
	for _, pa := range c.PrefixAdvertisements {
		pfx, err := netip.ParsePrefix(pa.CIDR)
		if err != nil {
			errs = append(errs, fmt.Errorf("bgpconfiguration: prefixAdvertisements cidr %q: %w", pa.CIDR, err))
			continue
		}
		entry := struct {
			cidr  netip.Prefix
			std   []uint32
			large [][3]uint32
		}{cidr: pfx.Masked()}
		for _, v := range pa.Communities {
			if nv, ok := named[v]; ok {
				v = nv
			}
			std, large, err := ParseCommunity(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("bgpconfiguration: prefixAdvertisements cidr %q: community %q: %w", pa.CIDR, v, err))
				continue
			}
			if large != nil {
				entry.large = append(entry.large, *large)
			} else {
				entry.std = append(entry.std, std)
			}
		}
		out = append(out, entry)
	}
	return out, errs
}

// ParseCommunity reads "aa:nn" (standard, each 16 bits) or "aa:nn:mm"
// (large, each 32 bits).
func ParseCommunity(s string) (uint32, *[3]uint32, error) {
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		a, err1 := strconv.ParseUint(parts[0], 10, 16)
		b, err2 := strconv.ParseUint(parts[1], 10, 16)
		if err1 != nil || err2 != nil {
			return 0, nil, fmt.Errorf("want two 16-bit numbers aa:nn")
		}
		return uint32(a)<<16 | uint32(b), nil, nil
	case 3:
		var l [3]uint32
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 10, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("want three 32-bit numbers aa:nn:mm")
			}
			l[i] = uint32(v)
		}
		return 0, &l, nil
	}
	return 0, nil, fmt.Errorf("want aa:nn or aa:nn:mm")
}
