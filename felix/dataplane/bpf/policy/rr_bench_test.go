package policy

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// BenchmarkCountingRR measures what counting costs a packet: the TCP
// request/response rate between a pod and its node through the entry
// programs with counting on, against the same programs loaded with
// counting off (bpf.Options.NoCounters), in one namespace and on one
// interface, the two attached in turn (BPF_LINK_UPDATE) and measured
// alternately, four times each, so load on the machine hits both alike.
// "rr" is one connection: every packet is established and counted once
// by reason each way. "crr" is a connection per exchange: each SYN walks
// a stage of ten rules and its verdict is counted under the deciding
// rule's id.
func BenchmarkCountingRR(b *testing.B) {
	nstest.RequireRoot(b)
	prefix := nstest.Prefix()
	node, pod := nstest.New(b, prefix, "node"), nstest.New(b, prefix, "pod")
	nodeH, _ := nstest.Handle(b, node)
	podH, podNS := nstest.Handle(b, pod)
	podIP, nodeIP := netip.MustParseAddr("10.65.0.1"), netip.MustParseAddr("198.18.0.1")
	if err := nstest.Workload(nodeH, podH, podNS, "cali0rr", podIP); err != nil {
		b.Fatal(err)
	}
	node.MustRun(b, "ip", "link", "set", "lo", "up")
	node.MustRun(b, "ip", "addr", "add", nodeIP.String()+"/32", "dev", "lo")
	node.MustRun(b, "ip", "route", "add", podIP.String()+"/32", "dev", "cali0rr", "scope", "link")
	nodeRun, podRun := runner(b, node), runner(b, pod)
	l, err := nodeH.LinkByName("cali0rr")
	if err != nil {
		b.Fatal(err)
	}
	ifindex := l.Attrs().Index

	on, err := bpf.Open(bpf.Options{NS: nodeRun})
	if err != nil {
		b.Fatal(err)
	}
	off, err := bpf.Open(bpf.Options{NS: nodeRun, NoCounters: true})
	if err != nil {
		on.Close()
		b.Fatal(err)
	}
	var links [2]*bpf.Attachment
	b.Cleanup(func() {
		for _, a := range links {
			if a != nil {
				_ = a.Detach()
			}
		}
		off.Close()
		on.Close()
		if err := bpf.RemoveDir(on.Dir, nil); err != nil {
			b.Error(err)
		}
	})
	// Ten rules; the last allows the echo port.
	var rules []calc.Rule
	for i := range 9 {
		rules = append(rules, calc.Rule{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: uint16(9000 + i), Max: uint16(9000 + i)}}, Index: i})
	}
	rules = append(rules, calc.Rule{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 8080, Max: 8080}}, Index: 9})
	p, err := Compile(Input{Final: true, Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny,
		Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "rr"}, Rules: rules}}}}})
	if err != nil {
		b.Fatal(err)
	}
	info, _ := json.Marshal(p.Slots)
	prog, err := on.LoadPolicy("pal_rr", p.Insns, info)
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	slot := uint32(bpf.FirstPolicySlot)
	if err := on.Maps[bpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		b.Fatal(err)
	}
	ep := bpf.Endpoint{Flags: bpf.EndpointWorkload, L2len: 14}
	ep.Slots[bpf.StageNormalIn] = slot
	if err := on.Maps[bpf.MapEndpoint].Put(uint32(ifindex), ep); err != nil {
		b.Fatal(err)
	}
	src := bpf.SrcKey{Prefixlen: 32 + 128, Ifindex: uint32(ifindex), Addr: bpf.Addr16(podIP)}
	if err := on.Maps[bpf.MapSrc].Put(src, uint8(1)); err != nil {
		b.Fatal(err)
	}
	use := func(o *bpf.Objects) {
		b.Helper()
		if err := o.UseResume(); err != nil {
			b.Fatal(err)
		}
		for h := range links {
			if links[h], err = o.Attach(links[h], ifindex, bpf.Hook(h), 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	use(on)
	ln, err := nstest.StartEcho(nodeRun, netip.AddrPortFrom(nodeIP, 8080).String())
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	dst := netip.AddrPortFrom(nodeIP, 8080)
	const d = 750 * time.Millisecond
	for _, mode := range []string{"rr", "crr"} {
		b.Run(mode, func(b *testing.B) {
			var counting, ref float64
			for range 4 {
				use(on)
				counting += rate(b, podRun, dst, d, mode == "crr")
				use(off)
				ref += rate(b, podRun, dst, d, mode == "crr")
			}
			counting, ref = counting/4, ref/4
			b.ReportMetric(counting, "rr/s")
			b.ReportMetric(ref, "ref-rr/s")
			b.ReportMetric(counting/ref, "x/ref")
		})
	}
	// The counted run counted: the deciding rule's counter moved.
	var per []bpf.CounterValue
	k := bpf.CounterKey{Ifindex: uint32(ifindex), Stage: bpf.StageNormalIn, Rule: p.Slots[9].ID}
	if err := on.Maps[bpf.MapCounters].Lookup(k, &per); err != nil {
		b.Fatalf("no counter of the deciding rule: %v", err)
	}
}

func runner(b *testing.B, ns nstest.NS) *nsexec.Runner {
	r, err := nsexec.New(ns.Path())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// rate is nstest.RR's rate, failing the benchmark on an error.
func rate(b *testing.B, run *nsexec.Runner, dst netip.AddrPort, d time.Duration, perConn bool) float64 {
	r, err := nstest.RR(run, dst, d, perConn)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
