package bpf

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// testDriver is a driver of the eBPF dataplane on a node namespace of
// the test's, with one allow-all profile, in sync; and the node's and a
// pod namespace's handles.
type testDriver struct {
	d           *Driver
	status      string
	nodeH, podH *netlink.Handle
	podNS       netns.NsHandle
	run         *nsexec.Runner
	pod         nstest.NS
}

func newTestDriver(t *testing.T) *testDriver {
	t.Helper()
	return newTestDriverWith(t, Config{})
}

// newTestDriverWith is newTestDriver with conf's fields besides the
// namespace and the status directory.
func newTestDriverWith(t *testing.T, conf Config) *testDriver {
	t.Helper()
	nstest.RequireRoot(t)
	prefix := nstest.Prefix()
	node, pod := nstest.New(t, prefix, "node"), nstest.New(t, prefix, "pod")
	nodeH, _ := nstest.Handle(t, node)
	podH, podNS := nstest.Handle(t, pod)
	run, err := nsexec.New(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := palbpf.RemoveAll("", run); err != nil {
			t.Error(err)
		}
		run.Close()
	})
	status := t.TempDir()
	conf.NetNS, conf.StatusDir = node.Path(), status
	d, err := New(conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	off := false
	d.OnConfigUpdate(calc.MergeConfig(&v3.FelixConfigurationSpec{IPv6Support: &off}, nil))
	d.OnProfileUpdate(&calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}})
	for _, id := range []string{calc.IPSetMasqPools, calc.IPSetAllPools} {
		d.OnIPSetUpdate(&calc.IPSet{ID: id, Type: calc.IPSetNet})
	}
	d.OnInSync()
	if err := d.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &testDriver{d: d, status: status, nodeH: nodeH, podH: podH, podNS: podNS, run: run, pod: pod}
}

// workload plumbs a pod's veth (iface on the node) and waits for the
// link watcher to attach its programs; it returns the node's side.
func (td *testDriver) workload(t *testing.T, iface string, addr netip.Addr) (netlink.Link, int) {
	t.Helper()
	if err := nstest.Workload(td.nodeH, td.podH, td.podNS, iface, addr); err != nil {
		t.Fatal(err)
	}
	link, err := td.nodeH.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	idx := link.Attrs().Index
	deadline := time.Now().Add(10 * time.Second)
	for !td.d.att.has(idx, 0) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher never attached the new interface")
		}
		time.Sleep(time.Millisecond)
	}
	return link, idx
}

// TestApplyDoesNotWaitForAttachmentUnderWay: while the link watcher's
// attachment of a new workload interface is under way, an apply writes
// the endpoint's entry without waiting for it, and holds back its route
// and status (fail closed); once the attachment is in place, the next
// apply adds both.
func TestApplyDoesNotWaitForAttachmentUnderWay(t *testing.T) {
	td := newTestDriver(t)
	d, status, nodeH := td.d, td.status, td.nodeH
	ctx := context.Background()

	const iface = "calitst0"
	addr := netip.MustParseAddr("10.80.0.5")
	_, idx := td.workload(t, iface, addr)
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

// applySettled applies, and again each time the attachments it left
// under way (fresh TCX links are made in the background) end, until none
// is.
func applySettled(t *testing.T, d *Driver) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := d.Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.att.mu.Lock()
		busy := len(d.att.busy)
		d.att.mu.Unlock()
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("attachments still under way after 10s")
		}
		select {
		case <-d.Wake():
		case <-time.After(10 * time.Millisecond):
		}
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

// TestAttachTypeTC: with bpfAttachType TC a new workload interface's
// entry programs run as cls_bpf filters, with no TCX link; switching to
// TCX moves them to pinned links and the filters go, switching back
// moves them to filters again and the links go, and the pod's traffic
// passes all along; RemoveAll (the iptables dataplane taking over)
// removes the filters and the qdisc.
func TestAttachTypeTC(t *testing.T) {
	td := newTestDriver(t)
	d := td.d
	ctx := context.Background()
	attachType := func(typ string) {
		t.Helper()
		off := false
		d.OnConfigUpdate(calc.MergeConfig(&v3.FelixConfigurationSpec{IPv6Support: &off, BPFAttachType: typ}, nil))
		applySettled(t, d)
	}
	attachType("TC")
	const iface = "calitst1"
	addr := netip.MustParseAddr("10.80.0.6")
	// The node's own address, for the echoes it sends the pod.
	lo, err := td.nodeH.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := td.nodeH.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 0, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	link, idx := td.workload(t, iface, addr)
	// onTC checks the interface's programs run as filters (and not as
	// links), or as links (and not as filters).
	onTC := func(when string, want bool) {
		t.Helper()
		ids, err := d.objs.TCPrograms(idx)
		if err != nil {
			t.Fatal(err)
		}
		links, err := d.objs.Links()
		if err != nil {
			t.Fatal(err)
		}
		var linked [2]ebpf.ProgramID
		for h := range 2 {
			if l := links[[2]int{idx, h}]; l != nil {
				linked[h] = l.Program
				l.Close()
			}
		}
		entry, none := d.objs.EntryID[0], [2]ebpf.ProgramID{}
		if want && (ids != entry || linked != none) {
			t.Errorf("%s: filters run %v, links %v; want the entry programs %v as filters only", when, ids, linked, entry)
		}
		if !want && (ids != none || linked != entry) {
			t.Errorf("%s: filters run %v, links %v; want the entry programs %v as links only", when, ids, linked, entry)
		}
	}
	onTC("a new interface", true)
	ep := &calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w"}, InterfaceName: iface,
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(addr, 32)}, Profiles: []string{"kns.a"}}
	d.OnEndpointUpdate(ep)
	d.OnRouteUpdate(calc.Route{Dst: netip.PrefixFrom(addr, 32), Iface: iface})
	if err := d.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasRoute(t, td.nodeH, addr) {
		t.Fatal("no route to the pod with its programs as filters")
	}
	if err := nstest.ICMP(td.run, addr, 8, 0); err != nil {
		t.Fatalf("the node does not reach the pod on cls_bpf filters: %v", err)
	}
	// Echoes all along the switches.
	stop, pinged := make(chan struct{}), make(chan []error, 1)
	go func() {
		var errs []error
		for {
			select {
			case <-stop:
				pinged <- errs
				return
			default:
			}
			if err := nstest.ICMP(td.run, addr, 8, 0); err != nil {
				errs = append(errs, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	attachType("TCX")
	onTC("after the switch to TCX", false)
	time.Sleep(50 * time.Millisecond)
	attachType("TC")
	onTC("after the switch back to TC", true)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	if errs := <-pinged; len(errs) > 0 {
		t.Errorf("%d echoes lost across the switches, the first: %v", len(errs), errs[0])
	}
	if err := palbpf.RemoveAll("", td.run); err != nil {
		t.Fatal(err)
	}
	if ids, err := d.objs.TCPrograms(idx); err != nil || ids != [2]ebpf.ProgramID{} {
		t.Errorf("filters left after RemoveAll: %v, %v", ids, err)
	}
	qs, err := td.nodeH.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Type() == "clsact" {
			t.Error("the clsact qdisc is left after RemoveAll")
		}
	}
}

// TestSweepsWaitOutANewPod: the periodic sweeps are due ctCollectEvery
// after the last, but not before quietUntil (a pod just became
// reachable), and never more than quietAtMost late.
func TestSweepsWaitOutANewPod(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		quiet time.Time
		want  time.Time
	}{
		{"no new pod", time.Time{}, t0.Add(ctCollectEvery)},
		{"a new pod long before", t0.Add(time.Second), t0.Add(ctCollectEvery)},
		{"a new pod just before", t0.Add(ctCollectEvery + 50*time.Millisecond), t0.Add(ctCollectEvery + 50*time.Millisecond)},
		{"new pods all the time", t0.Add(ctCollectEvery + 5*time.Second), t0.Add(ctCollectEvery + quietAtMost)},
	} {
		d := &Driver{}
		d.lastRefresh.gc, d.quietUntil = t0, c.quiet
		if got := d.gcDue(); !got.Equal(c.want) {
			t.Errorf("%s: sweeps due at +%v, want +%v", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

// The TCX attachment's cost is named in the log when the kernel's grace
// periods are not expedited, and only then.
func TestNoteRCUGracePeriods(t *testing.T) {
	for _, c := range []struct {
		content string
		logged  bool
	}{{"0\n", true}, {"1\n", false}, {"", false}} {
		file := filepath.Join(t.TempDir(), "rcu_expedited")
		if c.content != "" {
			if err := os.WriteFile(file, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		logger, hook := test.NewNullLogger()
		logger.SetLevel(log.InfoLevel)
		noteRCUGracePeriods(log.NewEntry(logger), file)
		if got := len(hook.AllEntries()) == 1; got != c.logged {
			t.Errorf("file %q: logged %v, want %v", c.content, got, c.logged)
		}
	}
}

// TestAwaitingEndpoints: a workload interface with no endpoint yet says
// a pod is about to be programmed (felix's loop then does not collect
// garbage while idle) for awaitEndpointFor after it appeared; its
// endpoint, or its removal, ends that.
func TestAwaitingEndpoints(t *testing.T) {
	td := newTestDriver(t)
	d, ctx := td.d, context.Background()
	if d.AwaitingEndpoints(time.Now()) {
		t.Fatal("awaiting an endpoint on a node with no workload interface")
	}
	addr := netip.MustParseAddr("10.80.0.7")
	td.workload(t, "calitst0", addr)
	if err := d.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !d.AwaitingEndpoints(time.Now()) {
		t.Error("a workload interface just made, no endpoint yet: not awaiting it")
	}
	if d.AwaitingEndpoints(time.Now().Add(awaitEndpointFor)) {
		t.Errorf("still awaiting the endpoint %s after its interface appeared", awaitEndpointFor)
	}
	d.OnEndpointUpdate(&calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w"}, InterfaceName: "calitst0",
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(addr, 32)}, Profiles: []string{"kns.a"}})
	applySettled(t, d)
	if d.AwaitingEndpoints(time.Now()) {
		t.Error("the endpoint arrived and is programmed: still awaiting it")
	}
	// A second veth, to a pod of its own, comes and goes without an
	// endpoint.
	podH, podNS := nstest.Handle(t, nstest.New(t, nstest.Prefix(), "pod2"))
	if err := nstest.Workload(td.nodeH, podH, podNS, "calitst1", netip.MustParseAddr("10.80.0.8")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !d.AwaitingEndpoints(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("a second workload interface with no endpoint: never awaited")
		}
		applySettled(t, d)
	}
	link, err := td.nodeH.LinkByName("calitst1")
	if err != nil {
		t.Fatal(err)
	}
	if err := td.nodeH.LinkDel(link); err != nil {
		t.Fatal(err)
	}
	for d.AwaitingEndpoints(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the interface awaiting an endpoint was removed: still awaiting")
		}
		applySettled(t, d)
		time.Sleep(time.Millisecond)
	}
}
