package main

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/palisade-net/palisade/cni-plugin/session"
)

// cmdStatus (CNI 1.1) reports whether ADDs can succeed: the datastore
// answers and the IPAM plugin is ready.
func cmdStatus(args *skel.CmdArgs) error {
	inv, err := session.Start(args)
	if err != nil {
		return err
	}
	defer inv.Close()
	if err := inv.Reachable(); err != nil {
		var e *types.Error
		if errors.As(err, &e) {
			return types.NewError(types.ErrPluginNotAvailable, e.Msg, "")
		}
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	if err := invoke.DelegateStatus(context.Background(), inv.Conf.IPAM.Type, args.StdinData, nil); err != nil {
		var e *types.Error
		if errors.As(err, &e) && e.Code == types.ErrIncompatibleCNIVersion {
			return nil // an older IPAM plugin has no STATUS
		}
		return err
	}
	return nil
}

// cmdGC (CNI 1.1) hands garbage collection to the IPAM plugin, which
// frees the addresses of attachments the runtime no longer knows.
func cmdGC(args *skel.CmdArgs) error {
	inv, err := session.Start(args)
	if err != nil {
		return err
	}
	defer inv.Close()
	return invoke.DelegateGC(context.Background(), inv.Conf.IPAM.Type, args.StdinData, nil)
}
