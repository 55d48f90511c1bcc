package main

import (
	"context"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/kubepod"
)

// kubeAddresses makes the pod's addressing annotations decide where its
// addresses come from: ipAddrsNoIpam gives them without IPAM, ipAddrs
// asks calico-ipam for exactly those, ipv4pools/ipv6pools restrict
// calico-ipam's pools, the namespace's labels go to the pools'
// namespaceSelector, and ipReleasePolicy keeps the address reserved for
// the pod's name in its StatefulSet. (kubepod.Mode.Read has already refused what the
// configured IPAM cannot do.) Another IPAM plugin runs with the network
// configuration's usePodCidr replaced by the node's pod CIDR.
func kubeAddresses(ctx context.Context, kube *kubepod.Mode, src addressSource, stdin []byte) (addressSource, error) {
	if d, ok := src.(delegatedIPAM); ok {
		conf, err := kube.PodCIDRConfig(ctx, stdin)
		if err != nil {
			return nil, err
		}
		d.stdin = conf
		return d, nil
	}
	if kube == nil {
		return src, nil
	}
	a := kube.Addressing
	if a.NoIPAM {
		return fixedAddresses{addrs: a.Requested}, nil
	}
	if in, ok := src.(*inProcessIPAM); ok {
		in.requested = a.Requested
		if kube.Namespace != nil {
			in.plugin.NamespaceLabels = kube.Namespace.Labels
		}
		if kube.ReleasePolicy != "" {
			in.sticky = kube.Sticky()
		}
		if len(a.IPv4Pools) > 0 || len(a.IPv6Pools) > 0 {
			conf := *in.plugin.Conf
			if len(a.IPv4Pools) > 0 {
				conf.IPAM.IPv4Pools = a.IPv4Pools
			}
			if len(a.IPv6Pools) > 0 {
				conf.IPAM.IPv6Pools = a.IPv6Pools
			}
			in.plugin.Conf = &conf
		}
	}
	return src, nil
}

// fixedAddresses are addresses given without IPAM (ipAddrsNoIpam):
// nothing to assign, nothing to release.
type fixedAddresses struct{ addrs []netip.Addr }

func (f fixedAddresses) Prepare(context.Context) error { return nil }

func (f fixedAddresses) Add(context.Context) (types.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, a := range f.addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}})
	}
	return res, nil
}

func (f fixedAddresses) UndoAdd(context.Context, bool) error { return nil }

func (f fixedAddresses) Del(context.Context, string) error { return nil }
