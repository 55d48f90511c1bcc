package vxlan_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/vxlan"
)

// bigOverlay is a node's overlay with 1,000 remote blocks on 100 other
// nodes, all through the tunnel.
func bigOverlay() *calc.Overlay {
	o := overlayFor("a", "b", false, false)
	o.VTEPs, o.Routes = nil, nil
	for n := 0; n < 100; n++ {
		node := fmt.Sprintf("n%d", n)
		tun := netip.AddrFrom4([4]byte{10, 250, byte(n), 1})
		o.VTEPs = append(o.VTEPs, calc.VTEP{Node: node, TunnelAddr: tun, MAC: calc.VTEPMAC(node, 4), ParentAddr: netip.AddrFrom4([4]byte{198, 19, 0, byte(n + 1)})})
		for b := 0; b < 10; b++ {
			k := n*10 + b
			o.Routes = append(o.Routes, calc.OverlayRoute{
				Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 240 + byte(k>>10), byte(k >> 2), byte(k&3) * 64}), 26), Node: node, Encap: true, Gateway: tun,
			})
		}
	}
	return o
}

// BenchmarkProgram1000Blocks programs, from scratch, the device, 100
// VTEPs' neighbour and FDB entries and 1,000 remote blocks' routes, the
// way felix does after a restart or when a node joins a big cluster
// (goal: ≤ 100 ms). The reference is iproute2 writing the same state in
// batch mode (`ip -batch`, `bridge -batch`), measured in the same run.
func BenchmarkProgram1000Blocks(b *testing.B) {
	a, _ := pairTB(b)
	o := bigOverlay()
	reset := func() {
		a.ns.Cmd("ip", "link", "del", "vxlan.calico").Run()
	}
	var ours time.Duration
	for i := 0; i < b.N; i++ {
		reset()
		a.m.Resync()
		a.m.SetOverlay(o)
		start := time.Now()
		if err := a.m.Apply(context.Background()); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		if a.m.LastOps != 1+100+100+1000 {
			b.Fatalf("%d writes, want 1201", a.m.LastOps)
		}
	}
	// The same state through iproute2's batch mode.
	want := vxlan.Desired(o, vxlan.Params{VNI: 4096, Port: 4789, MTU4: 1450, MTU6: 1430, Parents: map[netip.Addr]string{addrA: "eth0"}}).String()
	var ipCmds, bridgeCmds strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		if strings.HasPrefix(l, "bridge ") {
			bridgeCmds.WriteString(strings.TrimPrefix(l, "bridge ") + "\n")
		} else {
			ipCmds.WriteString(strings.TrimPrefix(l, "ip ") + "\n")
		}
	}
	var ref time.Duration
	for i := 0; i < b.N; i++ {
		reset()
		start := time.Now()
		for _, c := range []struct {
			tool  string
			batch string
		}{{"ip", ipCmds.String()}, {"bridge", bridgeCmds.String()}} {
			cmd := a.ns.Cmd(c.tool, "-batch", "-")
			cmd.Stdin = strings.NewReader(c.batch)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s -batch: %v: %s", c.tool, err, out)
			}
		}
		ref += time.Since(start)
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/program")
	b.ReportMetric(float64(ref.Milliseconds())/float64(b.N), "ms/iproute2")
	b.ReportMetric(float64(ours)/float64(ref), "x/ref")
}
