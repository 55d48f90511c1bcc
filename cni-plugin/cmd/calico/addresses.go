package main

import (
	"context"
	"net/netip"
	"os"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/cni-plugin/ipamplugin"
	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// addressSource is where a workload's addresses come from.
type addressSource interface {
	// Prepare reads ahead what Add will need, without changing anything,
	// so it may run while the caller decides whether Add is needed.
	Prepare(ctx context.Context) error
	// Add assigns the invocation's container its addresses.
	Add(ctx context.Context) (types.Result, error)
	// UndoAdd releases what Add assigned and nothing else; live is set
	// when a live endpoint of the container may hold addresses of its
	// handle, which an IPAM plugin that can only release by container
	// must then leave alone.
	UndoAdd(ctx context.Context, live bool) error
	// Del releases the addresses of the container containerID.
	Del(ctx context.Context, containerID string) error
}

// addressSourceFor runs calico-ipam in-process over the invocation's own
// datastore connection (no second process, no second connection; the same
// result as executing it), and executes any other IPAM plugin as a
// runtime would.
func addressSourceFor(inv *session.Session, store datastore.Interface, stdin []byte, containerID string) addressSource {
	if inv.Conf.IPAM.Type == ipamplugin.Type && inv.KV() != nil {
		plugin := ipamplugin.Plugin{Alloc: ipam.New(store, inv.KV()), Conf: inv.Conf, Workload: inv.Workload, Log: inv.Log}
		return &inProcessIPAM{plugin: plugin, containerID: containerID}
	}
	return delegatedIPAM{ipamType: inv.Conf.IPAM.Type, stdin: stdin, containerID: containerID}
}

// inProcessIPAM is calico-ipam's logic called directly.
type inProcessIPAM struct {
	plugin      ipamplugin.Plugin
	containerID string
	prepared    *ipamplugin.Prepared
	// assigned are the addresses Add assigned (none when it returned
	// addresses the handle already held).
	assigned []netip.Addr
	// requested, when set, are the exact addresses to assign (a pod's
	// ipAddrs annotation).
	requested []netip.Addr
	// sticky, when set, is the pod's sticky reservation (its
	// ipReleasePolicy); created says Add created it.
	sticky  *ipamplugin.Sticky
	created bool
}

func (i *inProcessIPAM) Prepare(ctx context.Context) error {
	prep, err := i.plugin.Prepare(ctx, i.containerID)
	if err != nil {
		return err
	}
	i.prepared = &prep
	return nil
}

func (i *inProcessIPAM) Add(ctx context.Context) (types.Result, error) {
	var res *current.Result
	var err error
	if i.prepared == nil {
		if err := i.Prepare(ctx); err != nil {
			return nil, err
		}
	}
	prep := *i.prepared
	i.prepared = nil // read once
	if i.sticky != nil && !prep.Held() {
		res, i.created, err = i.plugin.AddSticky(ctx, *i.sticky, i.containerID)
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	if len(i.requested) > 0 {
		res, i.assigned, err = i.plugin.AddRequested(ctx, prep, i.requested)
	} else {
		res, i.assigned, err = i.plugin.AddPrepared(ctx, prep)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// UndoAdd releases the addresses Add assigned, while the container's
// handle holds them; addresses it found held are left to DEL.
func (i *inProcessIPAM) UndoAdd(ctx context.Context, _ bool) error {
	if i.sticky != nil && len(i.assigned) == 0 {
		return i.plugin.UndoSticky(ctx, *i.sticky, i.containerID, i.created)
	}
	return i.plugin.ReleaseAssigned(ctx, i.plugin.HandleID(i.containerID), i.assigned)
}

func (i *inProcessIPAM) Del(ctx context.Context, containerID string) error {
	return i.plugin.Del(ctx, containerID)
}

// delegatedIPAM executes the configured IPAM plugin from CNI_PATH.
type delegatedIPAM struct {
	ipamType    string
	stdin       []byte
	containerID string
}

// Prepare has nothing to read ahead: the plugin runs as a whole.
func (d delegatedIPAM) Prepare(context.Context) error { return nil }

func (d delegatedIPAM) Add(ctx context.Context) (types.Result, error) {
	return invoke.DelegateAdd(ctx, d.ipamType, d.stdin, nil)
}

// UndoAdd runs the plugin's DEL, which releases by container: unless a
// live endpoint of the container may hold what it would release.
func (d delegatedIPAM) UndoAdd(ctx context.Context, live bool) error {
	if live {
		log.WithField("ipam", d.ipamType).Warn("Not releasing through the IPAM plugin: a live endpoint of this container may hold its addresses; the container's DEL releases them")
		return nil
	}
	return d.Del(ctx, d.containerID)
}

// Del runs the plugin's DEL; for another container than the invocation's,
// CNI_CONTAINERID is switched for the call, as the runtime would set it.
func (d delegatedIPAM) Del(ctx context.Context, containerID string) error {
	if containerID != d.containerID {
		defer os.Setenv("CNI_CONTAINERID", os.Getenv("CNI_CONTAINERID"))
		os.Setenv("CNI_CONTAINERID", containerID)
	}
	return invoke.DelegateDel(ctx, d.ipamType, d.stdin, nil)
}
