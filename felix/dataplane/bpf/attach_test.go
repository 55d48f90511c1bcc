package bpf

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestApplyDoesNotWaitForAttachmentUnderWay: while the link watcher's
// attachment of a new workload interface is under way (two RCU grace
// periods in the kernel), an apply writes the endpoint's entry without
// waiting for it, and holds back its route and status (fail closed); once
// the attachment is in place, the next apply adds both.
func TestApplyDoesNotWaitForAttachmentUnderWay(t *testing.T) {
	nstest.RequireRoot(t)
	prefix := nstest.Prefix()
	node, pod := nstest.New(t, prefix, "node"), nstest.New(t, prefix, "pod")
	nodeH, _ := nstest.Handle(t, node)
	podH, podNS := nstest.Handle(t, pod)
	run, err := nsexec.New(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	defer func() {
		if err := palbpf.RemoveAll("", run); err != nil {
			t.Error(err)
		}
	}()
	status := t.TempDir()
	d, err := New(Config{NetNS: node.Path(), StatusDir: status})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	off := false
	d.OnConfigUpdate(calc.MergeConfig(&v3.FelixConfigurationSpec{IPv6Support: &off}, nil))
	d.OnProfileUpdate(&calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}})
	for _, id := range []string{calc.IPSetMasqPools, calc.IPSetAllPools} {
		d.OnIPSetUpdate(&calc.IPSet{ID: id, Type: calc.IPSetNet})
	}
	d.OnInSync()
	if err := d.Apply(ctx); err != nil {
		t.Fatal(err)
	}

	const iface = "calitst0"
	addr := netip.MustParseAddr("10.80.0.5")
	if err := nstest.Workload(nodeH, podH, podNS, iface, addr); err != nil {
		t.Fatal(err)
	}
	link, err := nodeH.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	idx := link.Attrs().Index
	deadline := time.Now().Add(10 * time.Second)
	for !d.att.has(idx, 0) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher never attached the new interface")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := d.Apply(ctx); err != nil { // the interface, blocked
		t.Fatal(err)
	}
	// Make the attachment look under way: the attacher forgets it (the
	// kernel keeps it, pinned) and a watcher's attach holds the interface.
	underWay := make(chan struct{})
	d.att.mu.Lock()
	held := [2]*palbpf.Attachment{d.att.att[[2]int{idx, 0}], d.att.att[[2]int{idx, 1}]}
	delete(d.att.att, [2]int{idx, 0})
	delete(d.att.att, [2]int{idx, 1})
	d.att.busy[idx] = underWay
	d.att.mu.Unlock()
	// attached ends the attachment under way.
	attached := func() {
		d.att.mu.Lock()
		d.att.att[[2]int{idx, 0}], d.att.att[[2]int{idx, 1}] = held[0], held[1]
		delete(d.att.busy, idx)
		close(underWay)
		d.att.mu.Unlock()
	}

	ep := &calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w"}, InterfaceName: iface,
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(addr, 32)}, Profiles: []string{"kns.a"}}
	d.OnEndpointUpdate(ep)
	d.OnRouteUpdate(calc.Route{Dst: netip.PrefixFrom(addr, 32), Iface: iface})
	applied := make(chan error, 1)
	go func() { applied <- d.Apply(ctx) }()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		attached()
		<-applied
		t.Fatal("apply waited for the attachment under way")
	}
	var got palbpf.Endpoint
	if err := d.objs.Maps[palbpf.MapEndpoint].Lookup(uint32(idx), &got); err != nil || got.Flags&palbpf.EndpointWorkload == 0 {
		t.Errorf("the endpoint's entry is not written while its attachment is under way: %+v, %v", got, err)
	}
	statusFile := filepath.Join(status, dataplane.StatusFileName("a", "w"))
	if hasRoute(t, nodeH, addr) {
		t.Error("the route to the pod is there before its interface's programs")
	}
	if _, err := os.Stat(statusFile); err == nil {
		t.Error("the endpoint is reported programmed before its interface's programs")
	}

	attached()
	if err := d.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasRoute(t, nodeH, addr) {
		t.Error("no route to the pod once its interface's programs are in place")
	}
	if _, err := os.Stat(statusFile); err != nil {
		t.Errorf("the endpoint is not reported programmed once its interface is: %v", err)
	}
}

func hasRoute(t *testing.T, h *netlink.Handle, addr netip.Addr) bool {
	t.Helper()
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.Equal(addr.AsSlice()) {
			return true
		}
	}
	return false
}
