package felix

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// lbService feeds a Service of any type.
func (f *sliceFeed) lbService(ns, name string, s *calc.Service) {
	f.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindService, Namespace: ns, Name: name}, Value: s}}
}

// readyOn is a ready endpoint on a node.
func readyOn(ip, node string) calc.SliceEndpoint {
	e := ready(ip)
	e.NodeName = node
	return e
}

// waitAsk waits until run's namespace gets an answer from dst.
func waitAsk(t *testing.T, run *nsexec.Runner, proto string, dst netip.AddrPort) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := askService(run, proto, dst)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: no answer: %v", proto, dst, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sub runs a subtest whose failures reach the cluster's helpers too.
func (c *cluster) sub(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(st *testing.T) {
		c.t = st
		defer func() { c.t = t }()
		f(st)
	})
}

// TestBPFNodePort: with real namespaces and packets, the eBPF dataplane
// load-balances traffic from outside the node itself (no kube-proxy):
// a node port on the node's address from an external client and from a
// pod, TCP and UDP, reaching both backends with the client's own address
// seen by them; an external address; externalTrafficPolicy Local (only
// this node's endpoint; a node without one does not answer);
// internalTrafficPolicy Local from a pod; sessionAffinity ClientIP and
// its timeout; a node port without endpoints refused at once.
func TestBPFNodePort(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	feed := &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = feed
	runFelix(t, c.ctx, c.cancel, cfg)
	setupPods(c) // web 10.65.0.1 (ns-a), client 10.65.0.2 (ns-a), other 10.65.0.3 (ns-b)
	nameServer(t, c.pods["web"].run, "web")
	nameServer(t, c.pods["other"].run, "other")
	nameServer(t, c.extRun, "ext")
	client := c.pods["client"].run
	extIP := netip.MustParseAddr("198.51.100.7")
	c.ext.MustRun(t, "ip", "route", "add", extIP.String()+"/32", "via", nodeAddr.String())

	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "p"}, {Proto: "udp", Port: namePort, Name: "u"}}
	spec := func(nodePort uint16) []calc.ServiceSpecPort {
		return []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80, NodePort: nodePort}, {Name: "u", Proto: "udp", Port: 80, NodePort: nodePort}}
	}
	both := []calc.SliceEndpoint{readyOn("10.65.0.1", nodeName), readyOn("10.65.0.3", nodeName)}
	feed.lbService("ns-a", "np", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.20")},
		ExternalIPs: []netip.Addr{extIP}, Ports: spec(30080)})
	feed.lbSlice("ns-a", "np-1", "np", ports, both...)
	// externalTrafficPolicy Local: web here, ext "on another node".
	feed.lbService("ns-a", "local", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.21")},
		Ports: spec(30081), ExternalLocal: true})
	feed.lbSlice("ns-a", "local-1", "local", ports, readyOn("10.65.0.1", nodeName), readyOn(extAddr.String(), "node-b"))
	feed.lbService("ns-a", "elsewhere", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.22")},
		Ports: spec(30082), ExternalLocal: true})
	feed.lbSlice("ns-a", "elsewhere-1", "elsewhere", ports, readyOn(extAddr.String(), "node-b"))
	// internalTrafficPolicy Local.
	feed.lbService("ns-a", "itp", &calc.Service{Type: calc.ServiceClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.23")},
		Ports: spec(0), InternalLocal: true})
	feed.lbSlice("ns-a", "itp-1", "itp", ports, readyOn("10.65.0.3", nodeName), readyOn(extAddr.String(), "node-b"))
	feed.lbService("ns-a", "itp-none", &calc.Service{Type: calc.ServiceClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.24")},
		Ports: spec(0), InternalLocal: true})
	feed.lbSlice("ns-a", "itp-none-1", "itp-none", ports, readyOn(extAddr.String(), "node-b"))
	// sessionAffinity ClientIP, 1 s.
	feed.lbService("ns-a", "sticky", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.25")},
		Ports: spec(30085), AffinitySeconds: 1})
	feed.lbSlice("ns-a", "sticky-1", "sticky", ports, both...)
	feed.lbService("ns-a", "empty", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.26")},
		Ports: spec(30086)})
	// A backend port nothing listens on.
	feed.lbService("ns-a", "closed", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.27")},
		Ports: []calc.ServiceSpecPort{{Name: "u", Proto: "udp", Port: 53, NodePort: 30087}}})
	feed.lbSlice("ns-a", "closed-1", "closed", []calc.ServicePort{{Proto: "udp", Port: 7171, Name: "u"}}, readyOn("10.65.0.3", nodeName))
	feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}

	nodePort := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(nodeAddr, p) }
	waitAsk(t, c.extRun, "tcp", nodePort(30080))

	c.sub(t, "node port from outside, client address kept", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			got, seen, errs := spread(c.extRun, proto, nodePort(30080), 40)
			if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
				t.Errorf("%s from outside to %s: answers %v (errors %v), want web and other, none lost", proto, nodePort(30080), got, errs)
			}
			if len(seen) != 1 || !seen[extAddr.String()] {
				t.Errorf("%s: the backends saw sources %v, want the client's %s only", proto, seen, extAddr)
			}
		}
	})
	c.sub(t, "external address", func(t *testing.T) {
		got, _, errs := spread(c.extRun, "tcp", netip.AddrPortFrom(extIP, 80), 30)
		if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
			t.Errorf("to the external address: answers %v (errors %v), want web and other", got, errs)
		}
	})
	c.sub(t, "node port from a pod", func(t *testing.T) {
		got, seen, errs := spread(client, "tcp", nodePort(30080), 30)
		if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
			t.Errorf("from a pod to the node's node port: answers %v (errors %v), want web and other", got, errs)
		}
		if len(seen) != 1 || !seen["10.65.0.2"] {
			t.Errorf("the backends saw %v, want the pod's 10.65.0.2", seen)
		}
	})
	c.sub(t, "externalTrafficPolicy Local", func(t *testing.T) {
		got, seen, errs := spread(c.extRun, "tcp", nodePort(30081), 20)
		if len(errs) > 0 || got["web"] != 20 {
			t.Errorf("eTP Local with web here: answers %v (errors %v), want web only", got, errs)
		}
		if !seen[extAddr.String()] || len(seen) != 1 {
			t.Errorf("eTP Local: web saw %v, want the client's %s", seen, extAddr)
		}
		// From a pod the Service's endpoints anywhere answer (as
		// kube-proxy, which sends its own pods to every endpoint).
		if got, _, _ := spread(client, "tcp", nodePort(30081), 30); got["ext"] == 0 || got["web"] == 0 {
			t.Errorf("eTP Local from a pod: answers %v, want web and the remote one", got)
		}
		for _, proto := range []string{"tcp", "udp"} {
			_, _, err := askService(c.extRun, proto, nodePort(30082))
			if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s, eTP Local, no endpoint here: %v, want no answer (dropped)", proto, err)
			}
		}
	})
	c.sub(t, "internalTrafficPolicy Local", func(t *testing.T) {
		got, _, errs := spread(client, "tcp", netip.MustParseAddrPort("10.96.0.23:80"), 20)
		if len(errs) > 0 || got["other"] != 20 {
			t.Errorf("iTP Local: answers %v (errors %v), want other (this node's) only", got, errs)
		}
		if _, _, err := askService(client, "tcp", netip.MustParseAddrPort("10.96.0.24:80")); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("iTP Local, no endpoint here: %v, want no answer (dropped)", err)
		}
	})
	c.sub(t, "sessionAffinity ClientIP", func(t *testing.T) {
		for _, from := range []struct {
			name string
			run  *nsexec.Runner
			dst  netip.AddrPort
		}{{"a pod to the cluster address", client, netip.MustParseAddrPort("10.96.0.25:80")}, {"outside to the node port", c.extRun, nodePort(30085)}} {
			got, _, errs := spread(from.run, "tcp", from.dst, 20)
			if len(errs) > 0 || len(got) != 1 {
				t.Errorf("%s with affinity: answers %v (errors %v), want one backend", from.name, got, errs)
			}
		}
		// The affinity lasts 1 s from its last use: then a client is
		// balanced again (each try after it has one chance in two to
		// reach the other backend).
		seen := map[string]bool{}
		for try := 0; len(seen) < 2 && try < 25; try++ {
			time.Sleep(1200 * time.Millisecond)
			name, _, err := askService(client, "tcp", netip.MustParseAddrPort("10.96.0.25:80"))
			if err == nil {
				seen[name] = true
			}
		}
		if len(seen) < 2 {
			t.Errorf("after the affinity's timeout, new connections never reached another backend: %v", seen)
		}
	})
	c.sub(t, "node port without endpoints refused", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			began := time.Now()
			_, _, err := askService(c.extRun, proto, nodePort(30086))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s to a node port without endpoints: %v, want connection refused", proto, err)
			}
			if d := time.Since(began); d > 200*time.Millisecond {
				t.Errorf("%s refused after %s, want at once", proto, d)
			}
		}
	})
	c.sub(t, "ICMP error about a translated flow", func(t *testing.T) {
		var err error
		for range 3 {
			if _, _, err = askService(c.extRun, "udp", nodePort(30087)); errors.Is(err, syscall.ECONNREFUSED) {
				return
			}
		}
		t.Errorf("UDP from outside to a node port whose backend port is closed: %v, want connection refused (the backend's ICMP error, translated)", err)
	})
	c.sub(t, "not a node port: untouched", func(t *testing.T) {
		// The node's own servers still answer on its address.
		c.expect(probe{from: "ext", to: "node", proto: "tcp", port: 8080, allowed: true})
	})
}

// askFrom sends one datagram from run's namespace, from source port
// sport, to dst and returns which backend answered ("" for none).
func askFrom(run *nsexec.Runner, sport int, dst netip.AddrPort) string {
	var c *net.UDPConn
	if err := run.Do(func() error {
		var err error
		c, err = net.DialUDP("udp4", &net.UDPAddr{Port: sport}, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("probe")); err != nil {
		return ""
	}
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(string(buf[:n]), " ")
	return name
}

// TestBPFMaglev: a Service with Calico's Maglev annotation gets, for
// traffic from outside to its external address, the backend its Maglev
// table gives each flow (by its addresses and ports): with one backend
// removed, every flow of that backend moves and (nearly) no other does;
// with it back, flows move to it only. The same Service without the
// annotation (random choice) moves about half the flows of the backends
// that stayed. The flows' translations expire in between (UDP 1 s), so
// each probe is a new flow.
func TestBPFMaglev(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	c.applyFelixConfig("  bpfConntrackTimeouts: {udpTimeout: 1s}\n")
	feed := &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = feed
	runFelix(t, c.ctx, c.cancel, cfg)
	setupPods(c)
	for _, p := range []string{"web", "client", "other"} {
		nameServer(t, c.pods[p].run, p)
	}
	mag, rnd := netip.MustParseAddrPort("198.51.100.9:80"), netip.MustParseAddrPort("198.51.100.10:80")
	for _, a := range []netip.AddrPort{mag, rnd} {
		c.ext.MustRun(t, "ip", "route", "add", a.Addr().String()+"/32", "via", nodeAddr.String())
	}
	ports := []calc.ServicePort{{Proto: "udp", Port: namePort, Name: "u"}}
	all := []calc.SliceEndpoint{readyOn("10.65.0.1", nodeName), readyOn("10.65.0.2", nodeName), readyOn("10.65.0.3", nodeName)}
	endpoints := func(eps ...calc.SliceEndpoint) {
		feed.lbSlice("ns-a", "mag-1", "mag", ports, eps...)
		feed.lbSlice("ns-a", "rnd-1", "rnd", ports, eps...)
	}
	for _, s := range []struct {
		name   string
		addr   netip.AddrPort
		maglev bool
	}{{"mag", mag, true}, {"rnd", rnd, false}} {
		feed.lbService("ns-a", s.name, &calc.Service{Type: calc.ServiceClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.4" + strconv.Itoa(len(s.name)))},
			ExternalIPs: []netip.Addr{s.addr.Addr()}, Ports: []calc.ServiceSpecPort{{Name: "u", Proto: "udp", Port: 80}}, Maglev: s.maglev})
	}
	endpoints(all...)
	feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}
	waitAsk(t, c.extRun, "udp", mag)
	waitAsk(t, c.extRun, "udp", rnd)

	const flows = 60
	// table maps each flow (source port) to its backend, every flow
	// answered; the previous flows' translations expire first.
	table := func(dst netip.AddrPort) map[int]string {
		t.Helper()
		time.Sleep(1200 * time.Millisecond)
		out := map[int]string{}
		for i := range flows {
			sport := 41000 + i
			name := ""
			for try := 0; name == "" && try < 5; try++ {
				name = askFrom(c.extRun, sport, dst)
			}
			if name == "" {
				t.Fatalf("flow from port %d to %s: no answer", sport, dst)
			}
			out[sport] = name
		}
		return out
	}
	// moved counts the flows of the backends in kept that changed
	// backend, and checks those of the others all did.
	moved := func(what string, before, after map[int]string, kept map[string]bool) int {
		t.Helper()
		n := 0
		for p, b := range before {
			switch {
			case !kept[b] && after[p] == b:
				t.Errorf("%s: the flow from port %d stayed on %s, which left", what, p, b)
			case kept[b] && after[p] != b:
				n++
			}
		}
		return n
	}
	before := map[netip.AddrPort]map[int]string{mag: table(mag), rnd: table(rnd)}
	for _, dst := range []netip.AddrPort{mag, rnd} {
		seen := map[string]int{}
		for _, b := range before[dst] {
			seen[b]++
		}
		if len(seen) != 3 {
			t.Fatalf("%s: the flows reached %v, want all three backends", dst, seen)
		}
	}
	// other leaves.
	endpoints(all[0], all[1])
	c.waitFor("other out of both Services", func() bool {
		for i := range 10 {
			if askFrom(c.extRun, 42000+i, mag) == "other" || askFrom(c.extRun, 42000+i, rnd) == "other" {
				return false
			}
		}
		return true
	})
	kept := map[string]bool{"web": true, "client": true}
	after := map[netip.AddrPort]map[int]string{mag: table(mag), rnd: table(rnd)}
	magMoved, rndMoved := moved("Maglev, other removed", before[mag], after[mag], kept), moved("random, other removed", before[rnd], after[rnd], kept)
	t.Logf("other removed: flows of web and client that moved: Maglev %d, random %d", magMoved, rndMoved)
	if magMoved > 1 {
		t.Errorf("Maglev: %d flows of the backends that stayed moved, want none (one at most: Maglev's slight disruption)", magMoved)
	}
	if rndMoved < 5 {
		t.Errorf("random choice: only %d flows of the backends that stayed moved; the test cannot tell Maglev from it", rndMoved)
	}
	// other comes back: Maglev's flows move to it only.
	endpoints(all...)
	// Each try with new flows: a flow keeps the backend it got.
	tries := 0
	c.waitFor("other back in the Maglev Service", func() bool {
		tries++
		for i := range 20 {
			if askFrom(c.extRun, 43000+20*tries+i, mag) == "other" {
				return true
			}
		}
		return false
	})
	again := table(mag)
	n, toOther := 0, 0
	for p, b := range after[mag] {
		switch {
		case again[p] == "other":
			toOther++
		case again[p] != b:
			n++
		}
	}
	if n > 1 || toOther == 0 {
		t.Errorf("Maglev, other back: %d flows moved between web and client (want none), %d moved to other (want some)", n, toOther)
	}
}

// TestBPFServicesIPv6: the load balancer on IPv6, with real packets: a
// cluster address reaches both backends (TCP and UDP) with the client's
// address seen, a node port on the node's IPv6 address from outside
// likewise, and a Service without endpoints is refused at once (ICMPv6
// port unreachable).
func TestBPFServicesIPv6(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", true)
	feed := &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = feed
	runFelix(t, c.ctx, c.cancel, cfg)
	node6, ext6 := c.addIPv6()
	web := c.addDualPod("ns-a", "web", "10.65.0.20", "fd65::20", nil, "sa-x")
	other := c.addDualPod("ns-a", "other", "10.65.0.21", "fd65::21", nil, "sa-x")
	client := c.addDualPod("ns-a", "client", "10.65.0.22", "fd65::22", nil, "sa-x")
	nameServer6(t, web.run, "web")
	nameServer6(t, other.run, "other")
	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "p"}, {Proto: "udp", Port: namePort, Name: "u"}}
	vip, empty := netip.MustParseAddr("fd00:96::10"), netip.MustParseAddr("fd00:96::11")
	feed.lbService("ns-a", "web", &calc.Service{Type: calc.ServiceNodePort, ClusterIPs: []netip.Addr{vip},
		Ports: []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80, NodePort: 30080}, {Name: "u", Proto: "udp", Port: 80, NodePort: 30080}}})
	feed.lbSlice("ns-a", "web-1", "web", ports, readyOn("fd65::20", nodeName), readyOn("fd65::21", nodeName))
	feed.lbService("ns-a", "empty", &calc.Service{Type: calc.ServiceClusterIP, ClusterIPs: []netip.Addr{empty},
		Ports: []calc.ServiceSpecPort{{Name: "p", Proto: "tcp", Port: 80}, {Name: "u", Proto: "udp", Port: 80}}})
	feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}
	waitAsk(t, client.run, "tcp", netip.AddrPortFrom(vip, 80))
	for _, c := range []struct {
		name string
		run  *nsexec.Runner
		dst  netip.AddrPort
		src  netip.Addr
	}{{"a pod to the cluster address", client.run, netip.AddrPortFrom(vip, 80), client.ip6}, {"outside to the node port", c.extRun, netip.AddrPortFrom(node6, 30080), ext6}} {
		for _, proto := range []string{"tcp", "udp"} {
			got, seen, errs := spread(c.run, proto, c.dst, 30)
			if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
				t.Errorf("%s, %s: answers %v (errors %v), want web and other", c.name, proto, got, errs)
			}
			if len(seen) != 1 || !seen[c.src.String()] {
				t.Errorf("%s, %s: the backends saw %v, want %s", c.name, proto, seen, c.src)
			}
		}
	}
	// Refused: UDP at once; a TCP connect may be refused only when its
	// SYN is sent again (a second later): the kernel keeps an ICMP error
	// that arrives while connect still holds its socket as a soft one
	// (TcpExtLockDroppedIcmps), as it would kube-proxy's REJECT.
	if _, _, err := askService(client.run, "udp", netip.AddrPortFrom(empty, 80)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("UDP to an IPv6 Service without endpoints: %v, want connection refused", err)
	}
	if _, err := dialTimeoutIn(client.run, netip.AddrPortFrom(empty, 80), 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("TCP to an IPv6 Service without endpoints: %v, want connection refused", err)
	}
}

// dialTimeoutIn opens a TCP connection from run's namespace.
func dialTimeoutIn(run *nsexec.Runner, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), timeout)
		return err
	})
	if c != nil {
		c.Close()
	}
	return c, err
}
