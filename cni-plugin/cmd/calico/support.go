package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/cni-plugin/dataplane"
	"github.com/palisade-net/palisade/cni-plugin/netconf"
	"github.com/palisade-net/palisade/cni-plugin/workload"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// addresses reads the IPAM plugin's result.
func addresses(r types.Result) ([]netip.Addr, types.DNS, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, types.DNS{}, fmt.Errorf("ipam result: %w", err)
	}
	ipnets := make([]net.IPNet, 0, len(res.IPs))
	for _, ip := range res.IPs {
		ipnets = append(ipnets, ip.Address)
	}
	addrs, err := dataplane.Addrs(ipnets)
	if err != nil {
		return nil, types.DNS{}, fmt.Errorf("ipam result: %w", err)
	}
	if len(addrs) == 0 {
		return nil, types.DNS{}, errors.New("ipam plugin returned no address")
	}
	return addrs, res.DNS, nil
}

// result is what ADD prints: both ends of the veth, the workload's
// addresses as /32 and /128 on its interface, and its default routes.
func result(v dataplane.Veth, made dataplane.Created, netns string, addrs []netip.Addr, dns types.DNS) *current.Result {
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: v.HostName, Mac: dataplane.HostMAC.String()},
			{Name: v.ContainerName, Mac: made.ContainerMAC.String(), Sandbox: netns},
		},
		DNS: dns,
	}
	v4, v6 := false, false
	for _, a := range addrs {
		bits := a.BitLen()
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Interface: current.Int(1)})
		v4, v6 = v4 || a.Is4(), v6 || a.Is6()
	}
	if v4 {
		res.Routes = append(res.Routes, &types.Route{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, GW: dataplane.GatewayIPv4})
	}
	if v6 {
		res.Routes = append(res.Routes, &types.Route{Dst: net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, GW: dataplane.GatewayIPv6})
	}
	return res
}

// profiles are the endpoint's profiles: the network's own, or under
// Kubernetes policy the namespace's.
func profiles(conf *netconf.NetConf, w netconf.Workload) []string {
	if conf.Policy.Type == "k8s" {
		return []string{"kns." + w.Namespace}
	}
	return []string{conf.Name}
}

// restoreEndpoint is the undo of writing ep over prev: prev is put back,
// or ep deleted (the store bounds the call; the invocation's context may
// have expired). When it cannot, the endpoint stays and *left says so.
func restoreEndpoint(store datastore.Interface, ep, prev *v3.WorkloadEndpoint, left *bool) error {
	if err := workload.Restore(context.Background(), store, ep, prev); err != nil {
		*left = true
		return err
	}
	return nil
}

// restoreIfWritten is the undo of a write whose answer was lost: w's
// endpoint is restored if the write stored it. When it cannot tell, *left
// says the endpoint may be stored.
func restoreIfWritten(store datastore.Interface, w netconf.Workload, addrs []string, prev *v3.WorkloadEndpoint, left *bool) error {
	if err := workload.RestoreIfWritten(context.Background(), store, w, addrs, prev); err != nil {
		*left = true
		return err
	}
	return nil
}

// replaceOther removes the endpoint of an earlier container of this pod
// that had another interface name (its veth is now this container's) and
// frees its addresses. Failure only logs: that container's own DEL will
// try again.
func replaceOther(ctx context.Context, logger *log.Entry, store datastore.Interface, ipam addressSource, old *v3.WorkloadEndpoint) {
	logger = logger.WithFields(log.Fields{"oldContainerID": old.Spec.ContainerID, "oldEndpoint": old.Name})
	_, err := store.Delete(ctx, datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: old.Namespace, Name: old.Name}, old.ResourceVersion)
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		logger.WithError(err).Warn("Could not remove the endpoint of the pod's replaced container")
		return
	}
	releaseReplaced(ctx, logger, ipam, old.Spec.ContainerID)
}

// releaseReplaced frees the addresses of a container this ADD replaced,
// through the IPAM's DEL for that container. Failure only logs: the old
// container's own DEL will try again.
func releaseReplaced(ctx context.Context, logger *log.Entry, ipam addressSource, oldContainerID string) {
	if err := ipam.Del(ctx, oldContainerID); err != nil {
		logger.WithError(err).WithField("oldContainerID", oldContainerID).Warn("Could not release the replaced container's addresses")
		return
	}
	logger.WithField("oldContainerID", oldContainerID).Info("Released the replaced container's addresses")
}
