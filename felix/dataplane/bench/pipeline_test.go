package bench

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

const toggle = `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: toggle}
spec:
  order: 1
  selector: role == 'server'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, source: {selector: role == 'client'}, destination: {ports: [8080]}}]
`

// bigBed is the 1,000 endpoint, 1,000 policy node with a server and a
// client pod; the server is in group g0 (ten policies, none allowing the
// client), so its port 8080 is closed to the client until the toggle
// policy allows it.
func bigBed(b *testing.B) (e *bed, srv, cli *pod) {
	e = newBed(b)
	start := time.Now()
	srv = e.plumb("srv", addr(1))
	cli = e.plumb("cli", addr(2))
	e.fillers(998, 100)
	e.policies(1000, 100)
	srv.wep = e.wep("srv", srv.iface, srv.ip, map[string]string{"role": "server", "group": "g0"})
	cli.wep = e.wep("cli", cli.iface, cli.ip, map[string]string{"role": "client", "group": "g50"})
	b.Logf("1,000 endpoints and 1,000 policies written in %s", time.Since(start).Round(time.Millisecond))
	return e, srv, cli
}

// BenchmarkPolicyToEnforced measures, with 1,000 local endpoints (real
// cali veths) and 1,000 active policies, the time from writing a policy
// to etcd to the first probe packet it lets through, and from deleting it
// to the first probe it drops.
func BenchmarkPolicyToEnforced(b *testing.B) {
	e, srv, cli := bigBed(b)
	server, err := nstest.Serve(srv.run, 8080)
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	start := time.Now()
	e.startFelix()
	e.waitStatus(srv.wep, 60*time.Second)
	e.waitStatus(cli.wep, 60*time.Second)
	b.Logf("felix programmed the node in %s", time.Since(start).Round(time.Millisecond))
	dst := netip.AddrPortFrom(srv.ip, 8080)
	if connect(cli.run, dst, 50*time.Millisecond) {
		b.Fatal("client reaches the server before the toggle policy: the benchmark measures nothing")
	}
	var on, off []time.Duration
	for range 25 {
		t0 := time.Now()
		e.apply(toggle)
		d, ok := until(cli.run, dst, true, t0, 5*time.Second)
		if !ok {
			b.Fatal("policy written but the probe never got through")
		}
		on = append(on, d)
		t0 = time.Now()
		e.delete(v3.KindGlobalNetworkPolicy, "", "toggle")
		d, ok = until(cli.run, dst, false, t0, 5*time.Second)
		if !ok {
			b.Fatal("policy deleted but the probe still gets through")
		}
		off = append(off, d)
	}
	all := append(on, off...)
	b.ReportMetric(ms(percentile(all, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(on, 0.99)), "allow-p99-ms")
	b.ReportMetric(ms(percentile(off, 0.99)), "deny-p99-ms")
	b.ReportMetric(ms(percentile(all, 0.99))/50, "p99/goal")
}

// BenchmarkNewPodFirstResponse measures, on a node with 100 policies and
// 100 endpoints, the time from writing a new pod's WorkloadEndpoint (its
// veth already plumbed, as the CNI plugin does) to its first TCP
// connection answered by a server that allows it. Three hundred pods are
// timed one after another, so p99 is the fourth slowest (of a hundred it
// was the second slowest, and moved by 4 ms from run to run); each one's
// endpoint and veth are removed before the next is written, as a CNI DEL
// would, so every pod meets a node of 100 endpoints. store-* is the
// datastore's share, measured alone afterwards (storeLatency).
func BenchmarkNewPodFirstResponse(b *testing.B) {
	e := newBed(b)
	srv := e.plumb("srv", addr(1))
	server, err := nstest.Serve(srv.run, 8080)
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	e.fillers(99, 10)
	e.policies(100, 10)
	e.apply(toggle)
	srv.wep = e.wep("srv", srv.iface, srv.ip, map[string]string{"role": "server", "group": "g0"})
	e.startFelix()
	e.waitStatus(srv.wep, 30*time.Second)
	dst := netip.AddrPortFrom(srv.ip, 8080)
	var lat []time.Duration
	const pods = 300
	for i := range pods {
		p := e.plumb("new"+itoa(i), addr(10+i))
		if connect(p.run, dst, 20*time.Millisecond) {
			b.Fatal("a pod with no endpoint reached the server: not failing closed")
		}
		t0 := time.Now()
		p.wep = e.newWep(p.name, p.iface, p.ip, map[string]string{"role": "client", "group": "g" + itoa(i%10)})
		d, ok := until(p.run, dst, true, t0, 5*time.Second)
		if !ok {
			b.Fatalf("new pod %s never reached the server", p.name)
		}
		lat = append(lat, d)
		// Gone again before the next one: every pod meets the same node.
		e.waitStatus(p.wep, 10*time.Second)
		e.delete(v3.KindWorkloadEndpoint, "bench", p.wep)
		e.waitStatusGone(p.wep, 10*time.Second)
		e.unplumb(p)
	}
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.9)), "p90-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(lat, 0.99))/10, "p99/goal")
	e.stop()
	store := storeLatency(b, e, 100)
	b.ReportMetric(ms(percentile(store, 0.5)), "store-p50-ms")
	b.ReportMetric(ms(percentile(store, 0.99)), "store-p99-ms")
}

// storeLatency times n endpoint writes, one after another with the pace
// of the new-pod loop, from the write to a watcher seeing it: the
// datastore's share of a new pod's time, measured alone (felix stopped).
func storeLatency(b *testing.B, e *bed, n int) []time.Duration {
	w, err := e.store.Watch(e.ctx, datastore.ListOptions{Kind: v3.KindWorkloadEndpoint}, "")
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var out []time.Duration
	for i := range n {
		time.Sleep(50 * time.Millisecond)
		t0 := time.Now()
		name := e.newWep("ref"+itoa(i), "caliref", addr(200), map[string]string{"role": "client"})
		for ev := range w.Events() {
			if ev.Type == datastore.Added && ev.Object != nil && ev.Object.GetObjectMeta().Name == name {
				break
			}
		}
		out = append(out, time.Since(t0))
		e.delete(v3.KindWorkloadEndpoint, "bench", name)
	}
	return out
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// echo serves one-byte request/response on port in run's namespace.
func echo(b *testing.B, run *nsexec.Runner, port int) net.Listener {
	var l net.Listener
	if err := run.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", ":"+itoa(port))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l
}

// rr runs one-byte request/response transactions over one connection for
// d and returns the rate per second.
func rr(b *testing.B, run *nsexec.Runner, dst netip.AddrPort, d time.Duration) float64 {
	var c net.Conn
	if err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), time.Second)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := []byte{'x'}
	n := 0
	start := time.Now()
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

// BenchmarkRequestResponse compares the pod→pod TCP request/response
// rate through the node with 1,000 endpoints and 1,000 policies
// programmed (the path allowed by policy) against the same path with no
// policy: a rule at the top of FORWARD that accepts the pair's packets
// before felix's chains. The two are measured alternately, one second
// each, four times, so load on the machine hits both alike. The rate
// before felix wrote any rule is reported too.
func BenchmarkRequestResponse(b *testing.B) {
	e, srv, cli := bigBed(b)
	l := echo(b, srv.run, 8080)
	defer l.Close()
	// Without felix: routes by hand, no rules at all.
	for _, p := range []*pod{srv, cli} {
		e.node.MustRun(b, "ip", "route", "add", p.ip.String()+"/32", "dev", p.iface, "scope", "link")
	}
	dst := netip.AddrPortFrom(srv.ip, 8080)
	const d = time.Second
	bare := rr(b, cli.run, dst, d)
	e.apply(toggle)
	e.startFelix()
	e.waitStatus(srv.wep, 60*time.Second)
	if _, ok := until(cli.run, dst, true, time.Now(), 10*time.Second); !ok {
		b.Fatal("the toggle policy never let the client through")
	}
	bypass := []string{"FORWARD", "-i", cli.iface, "-o", srv.iface, "-j", "ACCEPT"}
	back := []string{"FORWARD", "-i", srv.iface, "-o", cli.iface, "-j", "ACCEPT"}
	var noPolicy, withPolicy float64
	for range 4 {
		withPolicy += rr(b, cli.run, dst, d)
		e.node.MustRun(b, append([]string{"iptables-nft", "-I"}, bypass...)...)
		e.node.MustRun(b, append([]string{"iptables-nft", "-I"}, back...)...)
		noPolicy += rr(b, cli.run, dst, d)
		e.node.MustRun(b, append([]string{"iptables-nft", "-D"}, bypass...)...)
		e.node.MustRun(b, append([]string{"iptables-nft", "-D"}, back...)...)
	}
	b.ReportMetric(bare, "no-rules-rr/s")
	b.ReportMetric(noPolicy/4, "base-rr/s")
	b.ReportMetric(withPolicy/4, "policy-rr/s")
	b.ReportMetric(withPolicy/noPolicy, "x/ref")
}
