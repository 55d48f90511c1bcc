// Command calico is the Palisade CNI plugin (type "calico"): it gives a
// workload addresses from the configured IPAM plugin, a cali veth with
// routes on both sides, and a WorkloadEndpoint in the datastore, undoing
// all of it when any step fails.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
	"github.com/palisade-net/palisade/cni-plugin/dataplane"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/cni-plugin/undo"
	"github.com/palisade-net/palisade/cni-plugin/workload"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
)

func main() {
	bin := cmdline.Binary{Name: "calico", Summary: "the Palisade CNI plugin: cali veth, routes and WorkloadEndpoint"}
	if handled, code := bin.HandleHuman(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, Status: cmdStatus, GC: cmdGC},
		version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "calico "+buildinfo.Get().Version)
}

// cmdAdd: IPAM → veth, addresses and routes → WorkloadEndpoint → profile.
// Each step that succeeds pushes its undo; any later failure runs them
// newest first, leaving nothing in the kernel, the datastore or IPAM.
func cmdAdd(args *skel.CmdArgs) (err error) {
	inv, err := session.Start(args)
	if err != nil {
		return err
	}
	defer inv.Close()
	conf, w, log, ctx := inv.Conf, inv.Workload, inv.Log, inv.Ctx

	store, err := inv.Store()
	if err != nil {
		return err
	}
	prev, err := workload.Get(ctx, store, w)
	if err != nil {
		return session.Retryable(err)
	}
	if prev != nil && prev.Spec.ContainerID == w.ContainerID && dataplane.HostVethExists(prev.Spec.InterfaceName) {
		log.Info("Endpoint already set up for this container; returning it")
		res, err := workload.Result(prev, args.Netns)
		if err != nil {
			return err
		}
		return types.PrintResult(res, conf.CNIVersion)
	}

	var undo undo.Stack
	defer func() {
		if err != nil {
			undo.Run(log)
		}
	}()

	// 1. Addresses.
	ipam := addressSourceFor(inv, store, args.StdinData, args.ContainerID)
	ipamResult, err := ipam.Add(ctx)
	if err != nil {
		return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, err)
	}
	undo.Push("release addresses", func() error {
		// The invocation's context may have run out: give the release its own.
		ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
		defer cancel()
		return ipam.Del(ctx, args.ContainerID)
	})
	addrs, dns, err := addresses(ipamResult)
	if err != nil {
		return err
	}

	// 2. The veth, addresses and routes on both sides.
	veth := dataplane.Veth{HostName: w.HostVethName(), ContainerName: args.IfName, NetNS: args.Netns,
		MTU: conf.MTU, Addrs: addrs, AllowIPForwarding: conf.ContainerSettings.AllowIPForwarding}
	made, err := dataplane.Setup(veth)
	if err != nil {
		return err
	}
	undo.Push("remove veth "+veth.HostName, func() error { return dataplane.RemoveHostVeth(veth.HostName) })

	// 3. The WorkloadEndpoint (replacing a previous container's of this pod).
	ep := workload.Endpoint(w, addrs, profiles(conf, w), veth.HostName, made.ContainerMAC)
	ep, err = workload.Write(ctx, store, ep, prev)
	if err != nil {
		return session.Retryable(err)
	}
	undo.Push("delete endpoint "+ep.Name, func() error { return deleteEndpoint(store, ep) })

	// 4. The network's profile, when no policy plugin owns policy.
	if conf.Policy.Type == "" {
		if _, err := workload.EnsureProfile(ctx, store, workload.NetworkProfile(conf.Name, w.IsKubernetes())); err != nil {
			return session.Retryable(err)
		}
	}

	// The previous container of this pod lost its veth in step 2: free its addresses.
	if prev != nil && prev.Spec.ContainerID != w.ContainerID {
		releaseReplaced(ctx, log, ipam, prev.Spec.ContainerID)
	}
	// 5. Optionally, felix's word that the endpoint's policy is in place.
	if conf.PolicySetupTimeoutSeconds > 0 {
		timeout := time.Duration(conf.PolicySetupTimeoutSeconds) * time.Second
		ok, err := workload.WaitProgrammed(ctx, conf.EndpointStatusDir, ep.Namespace, ep.Name, addrs, timeout)
		switch {
		case err != nil:
			log.WithError(err).Warn("Could not read felix's endpoint status; not waiting for policy")
		case !ok:
			log.WithField("timeout", timeout).Warn("Felix did not report the endpoint programmed in time; its traffic is dropped until it does")
		}
	}
	log.WithField("endpoint", ep.Name).WithField("addresses", ep.Spec.IPNetworks).Info("Workload networked")
	return types.PrintResult(result(veth, made, args.Netns, addrs, dns), conf.CNIVersion)
}

// cmdDel removes the workload's interface (if its namespace still exists),
// its endpoint (only if it still belongs to this container) and its
// addresses. Everything already gone is fine: DEL may come twice or late.
func cmdDel(args *skel.CmdArgs) error {
	inv, err := session.Start(args)
	if err != nil {
		return err
	}
	defer inv.Close()
	conf, w, log, ctx := inv.Conf, inv.Workload, inv.Log, inv.Ctx

	if err := dataplane.RemoveContainerSide(args.Netns, args.IfName); err != nil {
		return err
	}
	store, err := inv.Store()
	if err != nil {
		return err
	}
	deleted, err := workload.DeleteIfOwned(ctx, store, w)
	if err != nil {
		return session.Retryable(err)
	}
	if err := addressSourceFor(inv, store, args.StdinData, args.ContainerID).Del(ctx, args.ContainerID); err != nil {
		return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, err)
	}
	log.WithField("endpointDeleted", deleted).Info("Workload released")
	return nil
}
