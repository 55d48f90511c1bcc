package lab

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// pairPath is two pods on different nodes of one lab, with servers in
// the second: a sink (throughput) and a one-byte echo (request/response).
type pairPath struct {
	l          *Lab
	from, to   Pod
	sink, echo net.Listener
}

func newPairPath(b *testing.B, o Options) *pairPath {
	b.Helper()
	l := newLab(b, o)
	pods := addPods(b, l, "bench", 1)
	if _, err := l.WaitReachable(context.Background(), 30*time.Second); err != nil {
		b.Fatal(err)
	}
	pp := &pairPath{l: l, from: pods[0], to: pods[1]}
	if err := l.InNamespace(pp.to.Key(), func() (err error) {
		if pp.sink, err = net.Listen("tcp4", netip.AddrPortFrom(pp.to.IP, 7200).String()); err != nil {
			return err
		}
		pp.echo, err = net.Listen("tcp4", netip.AddrPortFrom(pp.to.IP, 7201).String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pp.sink.Close(); pp.echo.Close() })
	go serveLoop(pp.sink, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	go serveLoop(pp.echo, func(c net.Conn) {
		buf := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	return pp
}

func serveLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); handle(c) }()
	}
}

// dial connects from the first pod to a port of the second.
func (pp *pairPath) dial(b *testing.B, port int) net.Conn {
	b.Helper()
	var c net.Conn
	if err := pp.l.InNamespace(pp.from.Key(), func() (err error) {
		c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(pp.to.IP, uint16(port)).String(), 5*time.Second)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return c
}

// throughput sends for d and returns bytes per second.
func (pp *pairPath) throughput(b *testing.B, d time.Duration) float64 {
	c := pp.dial(b, 7200)
	defer c.Close()
	buf := make([]byte, 256<<10)
	start := time.Now()
	var sent int64
	for time.Since(start) < d {
		n, err := c.Write(buf)
		if err != nil {
			b.Fatal(err)
		}
		sent += int64(n)
	}
	return float64(sent) / time.Since(start).Seconds()
}

// requestResponse makes one-byte round trips on one connection for d and
// returns them per second.
func (pp *pairPath) requestResponse(b *testing.B, d time.Duration) float64 {
	c := pp.dial(b, 7201)
	defer c.Close()
	buf := []byte{'x'}
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkPodToPodVXLAN measures pod-to-pod TCP between two nodes over
// the VXLAN overlay (backend vxlan, vxlanMode Always) against the routed
// path (BGP, vxlanMode Never), both labs up at once and measured in turn:
// throughput (one connection, 256 KiB writes) and one-byte
// request/response rate (one connection). x/ref is the request/response
// ratio (goal ≥ 0.85), throughput-x/ref the throughput ratio.
func BenchmarkPodToPodVXLAN(b *testing.B) {
	requireLab(b)
	routed := newPairPath(b, Options{Nodes: 2})
	vxlan := newPairPath(b, Options{Nodes: 2, Backend: BackendVXLAN})
	const d = time.Second
	var tr, tv, rr, rv float64
	for i := 0; i < b.N; i++ {
		tr += routed.throughput(b, d)
		tv += vxlan.throughput(b, d)
		rr += routed.requestResponse(b, d)
		rv += vxlan.requestResponse(b, d)
	}
	n := float64(b.N)
	b.ReportMetric(tv*8/1e9/n, "Gbit/s-vxlan")
	b.ReportMetric(tr*8/1e9/n, "Gbit/s-routed")
	b.ReportMetric(rv/n, "rr/s-vxlan")
	b.ReportMetric(rr/n, "rr/s-routed")
	b.ReportMetric(rv/rr, "x/ref")
	b.ReportMetric(tv/tr, "throughput-x/ref")
}
