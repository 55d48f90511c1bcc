// Command calico is the Palisade CNI plugin (type "calico"): it gives a
// workload addresses from the configured IPAM plugin, a cali veth with
// routes on both sides, and a WorkloadEndpoint in the datastore, undoing
// all of it when any step fails.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
	"github.com/palisade-net/palisade/cni-plugin/dataplane"
	"github.com/palisade-net/palisade/cni-plugin/kubepod"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/cni-plugin/undo"
	"github.com/palisade-net/palisade/cni-plugin/workload"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
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
// newest first, leaving nothing in the kernel, the datastore or IPAM that
// this ADD made, and nothing of a live endpoint's undone. Datastore reads
// and writes that do not depend on each other go out together, so an ADD
// waits for as few round trips as it can.
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
	kube, err := kubepod.Start(conf, w)
	if err != nil {
		return err
	}
	ipam := addressSourceFor(inv, store, args.StdinData, args.ContainerID)

	// 0. The workload's endpoints as they stand, read while IPAM reads
	// what it will assign from (reads only: the endpoints decide whether
	// to assign), and in Kubernetes mode the pod and its namespace.
	var pod workload.Pod
	var prepErr error
	if err := together(
		func() (err error) { pod, err = workload.ReadPod(ctx, store, w); return session.Retryable(err) },
		func() error { prepErr = ipam.Prepare(ctx); return nil },
		func() error { return kube.Read(ctx) },
	); err != nil {
		return err
	}
	// One interface per workload, as Calico: a second interface of the
	// same container would share its veth and its handle's addresses.
	if other := pod.OtherInterface(w.ContainerID); other != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("container %s already has interface %q on network %q (workloadendpoint %q); "+
			"Palisade, like Calico, gives a pod one interface per network, so CNI_IFNAME %q is refused", w.ContainerID,
			other.Spec.Endpoint, conf.Name, other.Name, w.Endpoint), "")
	}
	prev := pod.Mine
	if prev != nil && prev.Spec.ContainerID == w.ContainerID && dataplane.HostVethExists(prev.Spec.InterfaceName) {
		log.Info("Endpoint already set up for this container; returning it")
		res, err := workload.Result(prev, args.Netns)
		if err != nil {
			return err
		}
		return types.PrintResult(res, conf.CNIVersion)
	}
	if prepErr != nil {
		return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, prepErr)
	}
	if ipam, err = kubeAddresses(ctx, kube, ipam, args.StdinData); err != nil {
		return err
	}

	var undo undo.Stack
	defer func() {
		if err != nil {
			undo.Run(log)
		}
	}()

	// 1. Addresses. Their undo releases only what this ADD assigned, and
	// nothing while an endpoint that claims them may be stored (a write
	// whose answer was lost, or whose undo failed): DEL releases them
	// with the endpoint.
	ipamResult, err := ipam.Add(ctx)
	if err != nil {
		return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, err)
	}
	endpointMayBeStored := false
	liveEndpoint := prev != nil && prev.Spec.ContainerID == w.ContainerID
	undo.Push("release addresses", func() error {
		if endpointMayBeStored {
			log.Warn("Keeping the addresses: an endpoint claiming them may be stored; DEL releases them")
			return nil
		}
		// The invocation's context may have run out: give the release its own.
		ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
		defer cancel()
		return ipam.UndoAdd(ctx, liveEndpoint)
	})
	addrs, dns, err := addresses(ipamResult)
	if err != nil {
		return err
	}

	// 2. The veth, addresses and routes on both sides; 3. the
	// WorkloadEndpoint (replacing a previous container's of this pod);
	// 4. the network's profile when no policy plugin owns policy. All at
	// once: with the workload's MAC chosen here, none needs another's
	// result, and each pushes its undo once done.
	mac, err := dataplane.NewContainerMAC()
	if err != nil {
		return err
	}
	veth := dataplane.Veth{HostName: w.HostVethName(), ContainerName: args.IfName, NetNS: args.Netns,
		MTU: conf.MTU, Addrs: addrs, AllowIPForwarding: conf.ContainerSettings.AllowIPForwarding, ContainerMAC: mac}
	var made dataplane.Created
	var ep *v3.WorkloadEndpoint
	var undoMu sync.Mutex
	pushUndo := func(what string, fn func() error) {
		undoMu.Lock()
		defer undoMu.Unlock()
		undo.Push(what, fn)
	}
	want := workload.Endpoint(w, addrs, profiles(conf, w), veth.HostName, mac)
	if err := kube.Decorate(want, addrs); err != nil {
		return err
	}
	err = together(
		func() (err error) {
			if made, err = dataplane.Setup(veth); err != nil {
				return err
			}
			pushUndo("remove veth "+veth.HostName, func() error { return dataplane.RemoveHostVeth(veth.HostName) })
			return nil
		},
		func() (err error) {
			ep, err = workload.Write(ctx, store, want, prev, pod.BadMine)
			switch {
			case err == nil:
				written := ep
				pushUndo("restore endpoint "+ep.Name, func() error { return restoreEndpoint(store, written, prev, &endpointMayBeStored) })
			case workload.MayHaveBeenWritten(err):
				// The answer was lost: the endpoint may be stored.
				pushUndo("restore endpoint "+want.Name+" if it was written", func() error {
					return restoreIfWritten(store, w, want.Spec.IPNetworks, prev, &endpointMayBeStored)
				})
			}
			return session.Retryable(err)
		},
		func() error {
			if conf.Policy.Type != "" {
				return nil
			}
			_, err := workload.EnsureProfile(ctx, store, workload.NetworkProfile(conf.Name, w.IsKubernetes()))
			return session.Retryable(err)
		},
		func() error {
			if err := kube.Annotate(ctx, args.ContainerID, addrs); err != nil {
				return err
			}
			pushUndo("remove the pod's address annotations", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
				defer cancel()
				return kube.Unannotate(ctx, args.ContainerID)
			})
			return nil
		},
	)
	if err != nil {
		return err
	}

	// The previous containers of this pod lost their veth in step 2: free
	// their addresses, and remove the endpoints of those that had another
	// interface name (one under this interface's name was replaced).
	if prev != nil && prev.Spec.ContainerID != w.ContainerID {
		releaseReplaced(ctx, log, ipam, prev.Spec.ContainerID)
	}
	for _, old := range pod.Others {
		replaceOther(ctx, log, store, ipam, old)
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
// The interface goes while the datastore is read and written: removing a
// veth waits on the kernel (RCU grace periods) for about as long as the
// datastore round trips take. Freeing the addresses before the interface
// is gone is what Calico does too: an address handed to a new workload
// meanwhile gets its own host route, which deleting the old veth leaves
// alone. A DEL for an interface its ADD refused (the container has
// another) releases nothing: the addresses are the other interface's.
func cmdDel(args *skel.CmdArgs) error {
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
	// DEL must get through even when the API server cannot be reached:
	// only the pod's annotations (and a usePodCidr IPAM) need it.
	kube, kerr := kubepod.Start(conf, w)
	if kerr != nil {
		log.WithError(kerr).Warn("No Kubernetes API client; the pod's address annotations stay")
	}
	var deleted bool
	err = together(
		func() error { return dataplane.RemoveContainerSide(args.Netns, args.IfName) },
		func() error {
			pod, err := workload.ReadPod(ctx, store, w)
			if err != nil {
				return session.Retryable(err)
			}
			if other := pod.OtherInterface(w.ContainerID); other != nil && pod.Mine == nil && pod.BadMine == nil {
				log.WithField("endpoint", other.Name).Info("Container's interface is another one; nothing of this interface to release")
				return nil
			}
			return together(
				func() (err error) {
					deleted, err = workload.DeleteIfOwned(ctx, store, w, pod)
					return session.Retryable(err)
				},
				func() error {
					src, err := kubeAddresses(ctx, kube, addressSourceFor(inv, store, args.StdinData, args.ContainerID), args.StdinData)
					if err == nil {
						err = src.Del(ctx, args.ContainerID)
					}
					if err != nil {
						return fmt.Errorf("ipam plugin %q: %w", conf.IPAM.Type, err)
					}
					return nil
				},
			)
		},
		func() error {
			if err := kube.Unannotate(ctx, args.ContainerID); err != nil {
				log.WithError(err).Warn("Could not remove the pod's address annotations")
			}
			return nil
		},
	)
	if err != nil {
		return err
	}
	log.WithField("endpointDeleted", deleted).Info("Workload released")
	return nil
}
