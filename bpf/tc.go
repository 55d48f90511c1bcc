package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A TCX attachment waits for an RCU grace period while it holds the rtnl
// lock (each hook, tens of ms on a busy machine), and every route,
// address and interface change on the node waits with it. A cls_bpf
// filter under a clsact qdisc attaches in a fraction of a millisecond and
// runs the same programs with the same verdicts (TC_ACT_OK, _SHOT and
// _UNSPEC are TCX_PASS, _DROP and _NEXT). Felix puts a new workload
// interface's entry programs there first and hands the interface over to
// TCX once it is programmed and the node is quiet; while both are there,
// TCX runs first and decides every IP packet, so nothing is evaluated
// twice.

// tcFilterName names our filters, which are told from anyone else's by it.
const tcFilterName = "palisade"

// tcPriority and tcHandle place our filter on each hook.
const (
	tcPriority = 1
	tcHandle   = 1
)

func (h Hook) tcParent() uint32 {
	if h == In {
		return netlink.HANDLE_MIN_INGRESS
	}
	return netlink.HANDLE_MIN_EGRESS
}

func tcDevice(ifindex int) netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
}

// AttachTC attaches kind's entry programs to its hooks of an interface
// (both, but the tunnel device's ingress only) as our cls_bpf filters
// (direct action), adding a clsact qdisc when it has none and replacing
// filters of ours already there.
func (o *Objects) AttachTC(ifindex int, kind int) error {
	return o.ns.Do(func() error {
		q := &netlink.GenericQdisc{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
			QdiscType:  "clsact",
		}
		if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("bpf: clsact qdisc on interface %d: %w", ifindex, err)
		}
		for _, h := range KindHooks(kind) {
			f := &netlink.BpfFilter{
				FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: h.tcParent(), Handle: tcHandle,
					Priority: tcPriority, Protocol: unix.ETH_P_ALL},
				Fd: o.Entry[kind][h].FD(), Name: tcFilterName, DirectAction: true,
			}
			if err := netlink.FilterReplace(f); err != nil {
				return fmt.Errorf("bpf: cls_bpf filter on the %s hook of interface %d: %w", h, ifindex, err)
			}
		}
		if kind == KindTunnel {
			// A hook the kind has no program for.
			return detachTCHook(ifindex, Out)
		}
		return nil
	})
}

// detachTCHook removes our filter from one hook of an interface, if it
// has one.
func detachTCHook(ifindex int, h Hook) error {
	var fs []netlink.Filter
	err := retryDump(func() (err error) { fs, err = netlink.FilterList(tcDevice(ifindex), h.tcParent()); return err })
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return fmt.Errorf("bpf: listing the filters of interface %d: %w", ifindex, err)
	}
	for _, f := range fs {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == tcFilterName {
			if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("bpf: removing the filter on the %s hook of interface %d: %w", h, ifindex, err)
			}
		}
	}
	return nil
}

// TCPrograms are the programs our filters on an interface run, by hook
// (0 where there is none).
func (o *Objects) TCPrograms(ifindex int) ([2]ebpf.ProgramID, error) {
	var ids [2]ebpf.ProgramID
	err := o.ns.Do(func() error {
		for _, h := range []Hook{In, Out} {
			var fs []netlink.Filter
			err := retryDump(func() (err error) { fs, err = netlink.FilterList(tcDevice(ifindex), h.tcParent()); return err })
			if err != nil {
				if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
					continue // no clsact qdisc
				}
				return err
			}
			for _, f := range fs {
				if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == tcFilterName {
					ids[h] = ebpf.ProgramID(bf.Id)
				}
			}
		}
		return nil
	})
	return ids, err
}

// DetachTC removes our filters from an interface. With dropQdisc, its
// clsact qdisc goes too when it held ours and no other filter is left on
// it: the kernel deactivates an interface that is up while it changes
// its qdiscs, which loses the packets on their way at that moment, so a
// handover to TCX keeps the (then empty, nearly free) qdisc. An
// interface that is gone has none.
func (o *Objects) DetachTC(ifindex int, dropQdisc bool) error {
	return o.ns.Do(func() error { return detachTC(ifindex, dropQdisc) })
}

// detachTC is DetachTC in the caller's namespace.
func detachTC(ifindex int, dropQdisc bool) error {
	left, removed := false, false
	for _, h := range []Hook{In, Out} {
		var fs []netlink.Filter
		err := retryDump(func() (err error) { fs, err = netlink.FilterList(tcDevice(ifindex), h.tcParent()); return err })
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
				continue
			}
			return fmt.Errorf("bpf: listing the filters of interface %d: %w", ifindex, err)
		}
		for _, f := range fs {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || bf.Name != tcFilterName {
				left = true
				continue
			}
			if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("bpf: removing the filter on the %s hook of interface %d: %w", h, ifindex, err)
			}
			removed = true
		}
	}
	if left || !removed || !dropQdisc {
		return nil
	}
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := netlink.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("bpf: removing the clsact qdisc of interface %d: %w", ifindex, err)
	}
	return nil
}

// removeAllTC removes our filters from every interface of ns (nil: the
// current one).
func removeAllTC(ns NetNS) error {
	if ns == nil {
		ns = currentNS{}
	}
	return ns.Do(func() error {
		var links []netlink.Link
		err := retryDump(func() (err error) { links, err = netlink.LinkList(); return err })
		if err != nil {
			return fmt.Errorf("bpf: listing interfaces: %w", err)
		}
		var errs []error
		for _, l := range links {
			if err := detachTC(l.Attrs().Index, true); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// retryDump runs a netlink dump again while the kernel says it was
// interrupted (what it lists changed meanwhile: interfaces come and go).
func retryDump(dump func() error) error {
	var err error
	for range 20 {
		if err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return err
		}
	}
	return err
}
