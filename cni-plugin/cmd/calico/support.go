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

// deleteEndpoint is the undo of writing ep: it deletes ep only as written
// (the store bounds the call; the invocation's context may have expired).
func deleteEndpoint(store datastore.Interface, ep *v3.WorkloadEndpoint) error {
	_, err := store.Delete(context.Background(), datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: ep.Namespace, Name: ep.Name}, ep.ResourceVersion)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	return err
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
