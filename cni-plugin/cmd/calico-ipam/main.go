// Command calico-ipam is the Palisade IPAM plugin (type "calico-ipam"): it
// hands out addresses from the IP pools in etcd through the block allocator,
// grouped under the handle "<network>.<containerID>", and can serve any
// main plugin (calico, or the reference bridge).
package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
	"github.com/palisade-net/palisade/cni-plugin/netconf"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

func main() {
	bin := cmdline.Binary{Name: "calico-ipam", Summary: "the Palisade IPAM plugin: addresses from etcd-backed IP pools"}
	if handled, code := bin.HandleHuman(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, Status: cmdStatus, GC: cmdGC},
		version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "calico-ipam "+buildinfo.Get().Version)
}

// cmdAdd assigns the configured families' addresses to the container's
// handle; a handle that already holds addresses (a repeated ADD) gets them
// back instead of new ones.
func cmdAdd(args *skel.CmdArgs) error {
	s, alloc, closeStore, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	defer closeStore()
	conf, w, ctx := s.Conf, s.Workload, s.Ctx
	handle := netconf.HandleID(conf.Name, args.ContainerID)

	held, err := alloc.IPsByHandle(ctx, handle)
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return session.Retryable(fmt.Errorf("reading handle %s: %w", handle, err))
	}
	var prefixes []netip.Prefix
	if len(held) > 0 {
		s.Log.WithField("handle", handle).Info("Handle already holds addresses; returning them")
		for _, a := range held {
			prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
		}
	} else {
		fam, _ := conf.AssignFamilies() // checked by Load
		req := ipam.AutoAssignArgs{HandleID: handle, Hostname: w.Node, Attrs: attributes(w),
			IPv4Pools: conf.IPAM.IPv4Pools, IPv6Pools: conf.IPAM.IPv6Pools}
		if fam.IPv4 {
			req.Num4 = 1
		}
		if fam.IPv6 {
			req.Num6 = 1
		}
		v4, v6, err := alloc.AutoAssign(ctx, req)
		for _, got := range []*ipam.Assignments{v4, v6} {
			if got != nil {
				prefixes = append(prefixes, got.IPs...)
			}
		}
		if err == nil && len(prefixes) != req.Num4+req.Num6 {
			err = fmt.Errorf("asked for %d IPv4 and %d IPv6 addresses, got %v: %w", req.Num4, req.Num6, prefixes, ipam.ErrExhausted)
		}
		if err != nil {
			if rerr := alloc.ReleaseByHandle(ctx, handle); rerr != nil && !errors.Is(rerr, datastore.ErrNotFound) {
				s.Log.WithError(rerr).Error("Could not release a partial assignment")
			}
			return session.Retryable(fmt.Errorf("assigning addresses on node %q: %w", w.Node, err))
		}
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, p := range prefixes {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
	}
	s.Log.WithField("handle", handle).WithField("addresses", prefixes).Info("Assigned")
	return types.PrintResult(res, conf.CNIVersion)
}

// cmdDel releases everything the container's handle holds; a handle that
// does not exist (already released) is fine.
func cmdDel(args *skel.CmdArgs) error {
	s, alloc, closeStore, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	defer closeStore()
	handle := netconf.HandleID(s.Conf.Name, args.ContainerID)
	if err := alloc.ReleaseByHandle(s.Ctx, handle); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return session.Retryable(fmt.Errorf("releasing handle %s: %w", handle, err))
	}
	s.Log.WithField("handle", handle).Info("Released")
	return nil
}

// cmdCheck verifies that the handle still holds exactly prevResult's
// addresses.
func cmdCheck(args *skel.CmdArgs) error {
	s, alloc, closeStore, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	defer closeStore()
	conf := s.Conf
	if conf.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	handle := netconf.HandleID(conf.Name, args.ContainerID)
	held, err := alloc.IPsByHandle(s.Ctx, handle)
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return session.Retryable(fmt.Errorf("reading handle %s: %w", handle, err))
	}
	var want []netip.Addr
	for _, ip := range prev.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		want = append(want, a.Unmap())
	}
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(want, held) {
		return fmt.Errorf("handle %s holds %v, prevResult has %v", handle, held, want)
	}
	return nil
}

// cmdStatus (CNI 1.1) reports whether the datastore answers.
func cmdStatus(args *skel.CmdArgs) error {
	s, _, closeStore, err := start(args)
	if err != nil {
		var e *types.Error
		if errors.As(err, &e) && e.Code == types.ErrTryAgainLater {
			return types.NewError(types.ErrPluginNotAvailable, e.Msg, "")
		}
		return err
	}
	closeStore()
	s.Close()
	return nil
}

// cmdGC (CNI 1.1) releases the handles of this network whose container is
// not among the runtime's valid attachments and whose addresses are all on
// this node.
func cmdGC(args *skel.CmdArgs) error {
	s, alloc, closeStore, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	defer closeStore()
	return collectGarbage(s, alloc)
}

// attributes are stored with each address: who holds it and since when.
func attributes(w netconf.Workload) map[string]string {
	attrs := map[string]string{"node": w.Node, "timestamp": time.Now().UTC().Format(time.RFC3339)}
	if w.IsKubernetes() {
		attrs["namespace"], attrs["pod"] = w.Namespace, w.Name
	}
	return attrs
}

// start opens the session and the allocator.
func start(args *skel.CmdArgs) (*session.Session, *ipam.Allocator, func(), error) {
	s, err := session.Start(args)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := s.Conf.Connect(s.Ctx)
	if err != nil {
		s.Close()
		return nil, nil, nil, err
	}
	return s, ipam.New(store, store.KV()), func() { store.Close() }, nil
}
