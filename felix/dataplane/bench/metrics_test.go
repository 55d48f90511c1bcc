package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"testing"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// metricsRounds is how many off-and-on pairs are run, in the order
// off, on, on, off, … so drift of the machine's load hits both alike.
const metricsRounds = 4

// BenchmarkMetricsCost measures what felix's Prometheus metrics cost on
// the hot path: the new-pod and policy-enforced loops (iptables
// dataplane, 100 endpoints and 100 policies) run with metrics off and
// with them on and scraped every second (Prometheus scrapes every
// 15 s or so), alternating in rounds on one node. The ratios on/off are
// the /ref metrics; the goal is at most 1.05.
func BenchmarkMetricsCost(b *testing.B) {
	b.Run("NewPod", func(b *testing.B) { metricsCost(b, false) })
	b.Run("PolicyEnforced", func(b *testing.B) { metricsCost(b, true) })
}

func metricsCost(b *testing.B, toggles bool) {
	e := newBed(b, "iptables")
	srv := e.plumb("srv", addr(1))
	cli := e.plumb("cli", addr(2))
	server, err := nstest.Serve(srv.run, 8080)
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	e.fillers(98, 10)
	e.policies(100, 10)
	labels := map[string]string{"role": "server", "group": "g0"}
	if !toggles {
		e.apply(toggle) // new pods are let in by it
	}
	srv.wep = e.wep("srv", srv.iface, srv.ip, labels)
	cli.wep = e.wep("cli", cli.iface, cli.ip, map[string]string{"role": "client", "group": "g50"})
	dst := netip.AddrPortFrom(srv.ip, 8080)
	port := freePort(b)
	var off, on []time.Duration
	next := 0
	for round := range metricsRounds * 2 {
		// off, on, on, off, off, on, …: a drift over the run hits both.
		metrics := (round+1)/2%2 == 1
		e.configureMetrics(metrics, port)
		e.startFelix()
		e.waitStatus(srv.wep, 30*time.Second)
		e.waitStatus(cli.wep, 30*time.Second)
		stop := func() {}
		if metrics {
			stop = scrapeEvery(b, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), time.Second)
		}
		var lat []time.Duration
		if toggles {
			a, d := timeToggles(b, e, cli, dst, 20)
			lat = append(a, d...)
		} else {
			lat = timeNewPods(b, e, dst, next, 40)
			next += 40
		}
		stop()
		e.stop()
		if metrics {
			on = append(on, lat...)
		} else {
			off = append(off, lat...)
		}
	}
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p90", 0.9}} {
		a, c := percentile(off, q.p), percentile(on, q.p)
		b.ReportMetric(ms(a), q.name+"-off-ms")
		b.ReportMetric(ms(c), q.name+"-on-ms")
		b.ReportMetric(float64(c)/float64(a), q.name+"-on/ref")
	}
}

// configureMetrics turns felix's metrics (and health) on at port, or off.
func (e *bed) configureMetrics(on bool, port int) {
	spec := "{ipv6Support: false, bpfEnabled: false}"
	if on {
		spec = "{ipv6Support: false, bpfEnabled: false, prometheusMetricsEnabled: true, prometheusMetricsHost: 127.0.0.1, prometheusMetricsPort: " +
			strconv.Itoa(port) + ", healthEnabled: true, healthHost: 127.0.0.1, healthPort: " + strconv.Itoa(port+1) + "}"
	}
	e.apply("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: " + spec + "\n")
}

// scrapeEvery GETs url every period until the returned stop is called.
func scrapeEvery(b *testing.B, url string, period time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		c := http.Client{Timeout: time.Second}
		for {
			if resp, err := c.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// freePort is a loopback port with the next one free too.
func freePort(b *testing.B) int {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	b.Fatal("no two free ports in a row")
	return 0
}
