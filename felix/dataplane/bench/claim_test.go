package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// BenchmarkVethClaim prices issue 28's idea for a new pod on TCX: spare
// veth pairs made and attached ahead, claimed by a pod. Alternately:
//
//   - fresh: what a new pod costs today, a veth made with its peer in the
//     pod's namespace, its host side up, then both TCX hooks attached
//     (each attachment waits for an RCU grace period under the rtnl lock);
//   - claim: a spare made beforehand in the node's namespace with both
//     hooks attached (untimed), then its host side renamed and set up, its
//     peer moved into the pod's namespace, renamed and set up — the rtnl
//     work a claiming CNI plugin would do (the attachments stay, the
//     interface index does not change, so felix would only write the
//     endpoint's entry).
//
// It reports p50 and p99 of each in ms, and the p50 of fresh's creation
// (before the attachments) and of the claim's rename of the host side and
// move of the peer.
func BenchmarkVethClaim(b *testing.B) {
	nstest.RequireRoot(b)
	node := nstest.New(b, nstest.Prefix(), "claimnode")
	pod := nstest.New(b, nstest.Prefix(), "claimpod")
	nodeH, _ := nstest.Handle(b, node)
	run := nstest.Runner(b, node)
	podH, podNS := nstest.Handle(b, pod)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	// attach attaches both hooks (in the node's namespace, where the
	// index is).
	attach := func(ifindex int) []link.Link {
		var ls []link.Link
		if err := run.Do(func() error {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: at, Anchor: link.Head()})
				if err != nil {
					return err
				}
				ls = append(ls, l)
			}
			return nil
		}); err != nil {
			b.Fatalf("attaching: %v", err)
		}
		return ls
	}
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	const rounds = 40
	// One measurement (it takes seconds, so the body runs once).
	var fresh, create, claim, rename, move []time.Duration
	for i := range rounds {
		// Fresh.
		start := time.Now()
		host := fmt.Sprintf("calif%d", i)
		must(nodeH.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: fmt.Sprintf("pf%d", i), PeerNamespace: netlink.NsFd(podNS)}))
		l, err := nodeH.LinkByName(host)
		must(err)
		must(nodeH.LinkSetUp(l))
		create = append(create, time.Since(start))
		links := attach(l.Attrs().Index)
		fresh = append(fresh, time.Since(start))
		for _, x := range links {
			x.Close()
		}
		must(nodeH.LinkDel(l))

		// A spare, made and attached ahead (untimed), then claimed.
		spare := fmt.Sprintf("calisp%d", i)
		must(nodeH.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: spare}, PeerName: fmt.Sprintf("sp%d", i)}))
		s, err := nodeH.LinkByName(spare)
		must(err)
		links = attach(s.Attrs().Index)
		peer, err := nodeH.LinkByName(fmt.Sprintf("sp%d", i))
		must(err)
		time.Sleep(20 * time.Millisecond)
		start = time.Now()
		must(nodeH.LinkSetName(s, fmt.Sprintf("calic%d", i)))
		rename = append(rename, time.Since(start))
		must(nodeH.LinkSetUp(s))
		t := time.Now()
		must(nodeH.LinkSetNsFd(peer, int(podNS)))
		move = append(move, time.Since(t))
		p, err := podH.LinkByName(fmt.Sprintf("sp%d", i))
		must(err)
		must(podH.LinkSetName(p, fmt.Sprintf("pc%d", i)))
		must(podH.LinkSetUp(p))
		claim = append(claim, time.Since(start))
		if got, err := nodeH.LinkByIndex(s.Attrs().Index); err != nil || got.Attrs().Name != fmt.Sprintf("calic%d", i) {
			b.Fatalf("the claimed interface: %v %v", got, err)
		}
		for _, x := range links {
			x.Close()
		}
		must(nodeH.LinkDel(s))
	}
	b.ReportMetric(ms(percentile(fresh, 0.5)), "fresh-p50-ms")
	b.ReportMetric(ms(percentile(fresh, 0.99)), "fresh-p99-ms")
	b.ReportMetric(ms(percentile(claim, 0.5)), "claim-p50-ms")
	b.ReportMetric(ms(percentile(claim, 0.99)), "claim-p99-ms")
	b.ReportMetric(ms(percentile(create, 0.5)), "create-p50-ms")
	b.ReportMetric(ms(percentile(rename, 0.5)), "rename-p50-ms")
	b.ReportMetric(ms(percentile(move, 0.5)), "move-p50-ms")
}
