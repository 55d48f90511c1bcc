package main

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/palisade-net/palisade/cni-plugin/dataplane"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/cni-plugin/workload"
)

// cmdCheck compares prevResult with the IPAM plugin's view, the endpoint
// and the kernel, and fails on the first difference.
func cmdCheck(args *skel.CmdArgs) error {
	inv, err := session.Start(args)
	if err != nil {
		return err
	}
	defer inv.Close()
	conf, w, ctx := inv.Conf, inv.Workload, inv.Ctx

	// session.Start parsed prevResult (and refused a malformed one).
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	prevResult, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	if err := invoke.DelegateCheck(context.Background(), conf.IPAM.Type, args.StdinData, nil); err != nil {
		return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, err)
	}

	store, err := inv.Store()
	if err != nil {
		return err
	}
	ep, err := workload.Get(ctx, store, w)
	if err != nil {
		return session.Retryable(err)
	}
	if ep == nil {
		return fmt.Errorf("workloadendpoint %q in namespace %q does not exist", w.EndpointName(), w.Namespace)
	}
	if ep.Spec.ContainerID != w.ContainerID {
		return fmt.Errorf("workloadendpoint %q belongs to container %s, not %s", ep.Name, ep.Spec.ContainerID, w.ContainerID)
	}
	var want []string
	var ipNets []net.IPNet
	for _, ip := range prevResult.IPs {
		want = append(want, ip.Address.String())
		ipNets = append(ipNets, ip.Address)
	}
	have := slices.Clone(ep.Spec.IPNetworks)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		return fmt.Errorf("workloadendpoint %q has ipNetworks %v, prevResult has %v", ep.Name, have, want)
	}
	addrs, err := dataplane.Addrs(ipNets)
	if err != nil {
		return err
	}
	return dataplane.Check(dataplane.Veth{HostName: ep.Spec.InterfaceName, ContainerName: args.IfName,
		NetNS: args.Netns, MTU: conf.MTU, Addrs: addrs})
}
