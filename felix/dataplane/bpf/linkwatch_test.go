package bpf

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// TestLinkWatchSurvivesLostUpdates: when the link updates' socket
// overflows (the netlink library then ends the subscription), the
// watcher follows the interfaces again, so a pod's veth made afterwards
// is still seen and attached. Before, felix saw no interface come or go
// again: a new pod was never programmed, and the interface of one gone
// failed every apply ("device group of …: no such device"), which the
// new-pod benchmark met under load.
func TestLinkWatchSurvivesLostUpdates(t *testing.T) {
	td := newTestDriver(t)
	w := td.d.links
	flap := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "flap0"}, PeerName: "flap1"}
	if err := td.nodeH.LinkAdd(flap); err != nil {
		t.Fatal(err)
	}
	// Stall the watcher, then flood it with updates until its socket's
	// buffer overflows and the subscription ends.
	w.mu.Lock()
	var err error
	for i := 0; i < 6000 && err == nil; i++ {
		if err = td.nodeH.LinkSetUp(flap); err == nil {
			err = td.nodeH.LinkSetDown(flap)
		}
	}
	w.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// Pods' veths made afterwards are seen, by their updates or by a
	// listing, and attached (by the watcher or by an apply it pokes):
	// the first may come while the watcher follows the interfaces
	// again, the second comes after the listing that catches up.
	for i, name := range []string{"calitst0", "calitst1"} {
		podH, podNS := td.podH, td.podNS
		if i > 0 {
			podH, podNS = nstest.Handle(t, nstest.New(t, nstest.Prefix(), "pod2"))
		}
		if err := nstest.Workload(td.nodeH, podH, podNS, name, netip.AddrFrom4([4]byte{10, 80, 0, byte(9 + i)})); err != nil {
			t.Fatal(err)
		}
		link, err := td.nodeH.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !td.d.att.has(link.Attrs().Index, 0) {
			if time.Now().After(deadline) {
				t.Fatalf("veth %s, made after the link updates were lost, was never seen and attached", name)
			}
			select {
			case <-td.d.Wake():
				if err := td.d.Apply(context.Background()); err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}
