// Command calico-ipam is the Palisade IPAM plugin (type "calico-ipam"): it
// hands out addresses from the IP pools in etcd through the block allocator,
// grouped under the handle "<network>.<containerID>", and can serve any
// main plugin (calico, or the reference bridge).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
	"github.com/palisade-net/palisade/cni-plugin/ipamplugin"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
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
	s, plugin, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	res, _, err := plugin.Add(s.Ctx, args.ContainerID)
	if err != nil {
		return err
	}
	return types.PrintResult(res, s.Conf.CNIVersion)
}

// cmdDel releases everything the container's handle holds.
func cmdDel(args *skel.CmdArgs) error {
	s, plugin, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	return plugin.Del(s.Ctx, args.ContainerID)
}

// cmdCheck verifies that the handle still holds exactly prevResult's
// addresses.
func cmdCheck(args *skel.CmdArgs) error {
	s, plugin, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	conf := s.Conf
	// session.Start parsed prevResult (and refused a malformed one).
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	return plugin.Check(s.Ctx, args.ContainerID, prev)
}

// cmdStatus (CNI 1.1) reports whether the datastore answers.
func cmdStatus(args *skel.CmdArgs) error {
	s, err := session.Start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Reachable(); err != nil {
		var e *types.Error
		if errors.As(err, &e) && e.Code == types.ErrTryAgainLater {
			return types.NewError(types.ErrPluginNotAvailable, e.Msg, "")
		}
		return err
	}
	return nil
}

// cmdGC (CNI 1.1) releases the handles of this network whose container is
// not among the runtime's valid attachments and whose addresses are all on
// this node.
func cmdGC(args *skel.CmdArgs) error {
	s, plugin, err := start(args)
	if err != nil {
		return err
	}
	defer s.Close()
	return collectGarbage(s, plugin.Alloc)
}

// start opens the session and the allocator over the session's
// datastore connection (which connects on its first request).
func start(args *skel.CmdArgs) (*session.Session, ipamplugin.Plugin, error) {
	s, err := session.Start(args)
	if err != nil {
		return nil, ipamplugin.Plugin{}, err
	}
	store, err := s.Store()
	if err != nil {
		s.Close()
		return nil, ipamplugin.Plugin{}, err
	}
	plugin := ipamplugin.Plugin{Alloc: ipam.New(store, s.KV()), Conf: s.Conf, Workload: s.Workload, Log: s.Log}
	return s, plugin, nil
}
