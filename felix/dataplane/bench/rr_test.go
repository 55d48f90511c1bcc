package bench

import (
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// echo serves one-byte request/response on port in run's namespace.
func echo(b *testing.B, run *nsexec.Runner, port int) *nstest.Echo {
	l, err := nstest.StartEcho(run, ":"+itoa(port))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// rr runs one-byte request/response transactions over one connection for
// d and returns the rate per second.
func rr(b *testing.B, run *nsexec.Runner, dst netip.AddrPort, d time.Duration) float64 {
	r, err := nstest.RR(run, dst, d, false)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// rrPairs is how many policy/no-policy pairs BenchmarkRequestResponse
// measures of each path on each dataplane (even: the median is of the
// middle two).
const rrPairs = 10

// hop is one node a request/response path crosses: the interfaces its
// packets arrive by (a pod's veth, or the link from the other node) and
// leave by.
type hop struct {
	node *nsexec.Runner
	h    *netlink.Handle
	ns   nstest.NS
	// in and out are the path's two interfaces on this node; pods are
	// the workload interfaces among them.
	in, out string
	pods    []string
}

// rrPath is a client pod, the server it talks to and the nodes between.
type rrPath struct {
	name string
	cli  *pod
	dst  netip.AddrPort
	hops []hop
}

// BenchmarkRequestResponse compares the pod→pod TCP request/response
// rate against the no-policy path, on the iptables dataplane and then on
// the eBPF one (the same nodes, felix moved over by bpfEnabled), for a
// client on another node than the server (across: the headline, x/ref)
// and for one beside it (same-node-x/ref). The server's node holds 1,000
// endpoints and 1,000 policies; the toggle policy lets the clients in.
//
// The no-policy path is the same kernel path with none of felix's
// per-packet work, on every node the path crosses: for iptables, rules
// at the top of raw and mangle PREROUTING and of filter FORWARD that
// accept the path's packets before felix's chains (raw holds felix's
// anti-spoofing rpfilter and mangle its conntrack accept, which run for
// every packet as the eBPF programs do); for eBPF, a TCX program before
// felix's on both hooks of the pods' interfaces that lets every packet
// through, and the same FORWARD rules ahead of the guard felix keeps in
// cali-FORWARD. Both keep the host's netfilter and its conntrack (felix's
// tables are there) on the path: the eBPF dataplane's host conntrack
// bypass (bpfHostConntrackBypass, on by default) sends an established
// flow's packets on from the pod's interface itself, which is why its
// policy path can beat it. The rate with no felix at all (no tables, no
// programs) is reported too (no-rules-rr/s).
//
// The policy and no-policy legs alternate, half a second each, in
// rrPairs pairs, each pair in the other order than the one before, so
// load on the machine hits both alike; x/ref is the median of the pairs'
// ratios. vs-iptables is the eBPF dataplane's x/ref over the iptables
// one's.
func BenchmarkRequestResponse(b *testing.B) {
	e, srv, cli := bigBed(b, "iptables")
	peer := e.addPeer("peer")
	remote := e.plumbOn(peer.h, "remote", addr(3))
	remote.wep = e.wepOn(peer.name, "remote", remote.iface, remote.ip, map[string]string{"role": "client", "group": "g50"})
	l := echo(b, srv.run, 8080)
	defer l.Close()
	dst := netip.AddrPortFrom(srv.ip, 8080)
	// Without felix: routes by hand, no rules at all.
	for _, p := range []*pod{srv, cli} {
		e.node.MustRun(b, "ip", "route", "add", p.ip.String()+"/32", "dev", p.iface, "scope", "link")
	}
	peer.ns.MustRun(b, "ip", "route", "add", remote.ip.String()+"/32", "dev", remote.iface, "scope", "link")
	// Between the nodes, as BGP would.
	peer.ns.MustRun(b, "ip", "route", "add", srv.ip.String()+"/32", "via", nodeAddr.String())
	e.node.MustRun(b, "ip", "route", "add", remote.ip.String()+"/32", "via", peerAddr.String())
	paths := []rrPath{
		{name: "across", cli: remote, dst: dst, hops: []hop{
			{node: peer.run, h: peer.h, ns: peer.ns, in: remote.iface, out: nodeLink, pods: []string{remote.iface}},
			{node: e.nodeRun, h: e.nodeH, ns: e.node, in: peerLink, out: srv.iface, pods: []string{srv.iface}},
		}},
		{name: "same-node", cli: cli, dst: dst, hops: []hop{
			{node: e.nodeRun, h: e.nodeH, ns: e.node, in: cli.iface, out: srv.iface, pods: []string{cli.iface, srv.iface}},
		}},
	}
	bare := map[string]float64{}
	for _, p := range paths {
		bare[p.name] = rr(b, p.cli.run, p.dst, time.Second)
	}
	e.apply(toggle)
	e.startFelix()
	peer.startFelix(e)
	e.waitStatus(srv.wep, 60*time.Second)
	e.waitStatusIn(peer.status, remote.wep, 60*time.Second)
	for _, p := range paths {
		if !opens(b, p.cli.run, p.dst, 10*time.Second) {
			b.Fatalf("%s: the toggle policy never let the client through", p.name)
		}
	}
	ratios := map[string]float64{}
	b.Run("iptables", func(b *testing.B) {
		for _, p := range paths {
			withPolicy, noPolicy, ratio := measure(b, p, func() { iptablesAccept(b, p, "-I", true) }, func() { iptablesAccept(b, p, "-D", true) })
			ratios["iptables/"+p.name] = ratio
			report(b, p.name, bare[p.name], noPolicy, withPolicy, ratio, 0)
		}
	})
	b.Run("bpf", func(b *testing.B) {
		e.apply(bpfOn)
		e.waitBPF(e.nodeRun, srv.iface, cli.iface)
		e.waitBPF(peer.run, remote.iface)
		for _, p := range paths {
			if !opens(b, p.cli.run, p.dst, 10*time.Second) {
				b.Fatalf("%s: the eBPF dataplane never let the client through", p.name)
			}
		}
		for _, p := range paths {
			var bypass []link.Link
			withPolicy, noPolicy, ratio := measure(b, p, func() {
				bypass = bpfBypass(b, p)
				iptablesAccept(b, p, "-I", false)
			}, func() {
				iptablesAccept(b, p, "-D", false)
				for _, l := range bypass {
					l.Close()
				}
			})
			report(b, p.name, bare[p.name], noPolicy, withPolicy, ratio, ratios["iptables/"+p.name])
		}
	})
}

// report names a path's metrics: the across-nodes path's without a
// prefix (it is the headline), the other's prefixed with its name.
func report(b *testing.B, path string, bare, noPolicy, withPolicy, ratio, iptablesRatio float64) {
	prefix := path + "-"
	if path == "across" {
		prefix = ""
	}
	b.ReportMetric(bare, prefix+"no-rules-rr/s")
	b.ReportMetric(noPolicy, prefix+"base-rr/s")
	b.ReportMetric(withPolicy, prefix+"policy-rr/s")
	b.ReportMetric(ratio, prefix+"x/ref")
	if iptablesRatio > 0 {
		b.ReportMetric(ratio/iptablesRatio, prefix+"vs-iptables-x/ref")
	}
}

// measure alternates a path's policy leg with its no-policy leg (on
// turns the bypass on, off turns it off) in rrPairs pairs, once felix is
// idle, each pair in the other order than the one before; it returns the
// mean rates and the median of the pairs' ratios: a pair's two legs meet
// the same load, and a spike spoils one pair rather than the result.
func measure(b *testing.B, p rrPath, on, off func()) (policy, base, ratio float64) {
	const d = 500 * time.Millisecond
	settle(b, 30*time.Second)
	ratios := make([]float64, 0, rrPairs)
	for i := range rrPairs {
		var pr, q float64
		if i%2 == 0 {
			pr = rr(b, p.cli.run, p.dst, d)
			on()
			q = rr(b, p.cli.run, p.dst, d)
			off()
		} else {
			on()
			q = rr(b, p.cli.run, p.dst, d)
			off()
			pr = rr(b, p.cli.run, p.dst, d)
		}
		policy, base = policy+pr, base+q
		ratios = append(ratios, pr/q)
	}
	slices.Sort(ratios)
	return policy / rrPairs, base / rrPairs, (ratios[rrPairs/2-1] + ratios[rrPairs/2]) / 2
}

// iptablesAccept inserts (-I) or deletes (-D) the rules that accept a
// path's packets ahead of felix's chains on every node it crosses: in
// filter FORWARD, and with all, in raw and mangle PREROUTING.
func iptablesAccept(b *testing.B, p rrPath, op string, all bool) {
	for _, h := range p.hops {
		for _, dir := range [][2]string{{h.in, h.out}, {h.out, h.in}} {
			rules := [][]string{{"-t", "filter", op, "FORWARD", "-i", dir[0], "-o", dir[1], "-j", "ACCEPT"}}
			if all {
				for _, t := range []string{"raw", "mangle"} {
					rules = append(rules, []string{"-t", t, op, "PREROUTING", "-i", dir[0], "-j", "ACCEPT"})
				}
			}
			for _, r := range rules {
				h.ns.MustRun(b, append([]string{"iptables-nft"}, r...)...)
			}
		}
	}
}

// settle waits until this process (felix runs in it) uses less than a
// tenth of a core over half a second: after a switch felix went on
// loading programs and removing the other dataplane's leftovers for
// seconds, which took CPU from the first rounds measured, the policy
// legs.
func settle(b *testing.B, limit time.Duration) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c0, t0 := cpu(), time.Now()
		time.Sleep(500 * time.Millisecond)
		if float64(cpu()-c0)/float64(time.Since(t0)) < 0.1 {
			return
		}
	}
	b.Logf("felix still busy after %s: measuring anyway", limit)
}

const bpfOn = `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {ipv6Support: false, bpfEnabled: true}
`

// waitBPF waits until the eBPF dataplane of a node holds workload
// entries for the interfaces.
func (e *bed) waitBPF(node *nsexec.Runner, ifaces ...string) {
	e.b.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		ok := false
		if v, err := inspect.Open("", node); err == nil {
			ifs, _ := v.Interfaces()
			n := 0
			for _, in := range ifs {
				if slices.Contains(ifaces, in.Name) && in.Kind == "workload" {
					n++
				}
			}
			ok = n == len(ifaces)
			v.Close()
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.b.Fatalf("the eBPF dataplane never programmed %v", ifaces)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bpfBypass attaches, before felix's, a TCX program to both hooks of a
// path's pod interfaces that lets every packet through as felix's would
// (marked seen, for the guard in iptables): the eBPF no-policy path.
// Closing the links detaches it.
func bpfBypass(b *testing.B, p rrPath) []link.Link {
	b.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "MIT", Instructions: asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 8, asm.Word), // __sk_buff.mark
		asm.Or.Imm32(asm.R2, palbpf.MarkSeen),
		asm.StoreMem(asm.R1, 8, asm.R2, asm.Word),
		asm.Mov.Imm(asm.R0, 0), // TCX_PASS: the programs after it do not run
		asm.Return(),
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	var out []link.Link
	for _, h := range p.hops {
		if err := h.node.Do(func() error {
			for _, name := range h.pods {
				l, err := h.h.LinkByName(name)
				if err != nil {
					return err
				}
				for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
					lk, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: prog, Attach: at, Anchor: link.Head()})
					if err != nil {
						return err
					}
					out = append(out, lk)
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}
