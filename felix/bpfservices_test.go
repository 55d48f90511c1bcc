package felix

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

// namePort is where nameServer listens (TCP and UDP).
const namePort = 7070

// nameServer answers on namePort in run's namespace with its name and the
// peer address it saw ("web 10.65.0.2:41000"): a TCP connection gets that
// line, then every line it sends back prefixed with the name, until it
// closes; a datagram gets the line.
func nameServer(t *testing.T, run *nsexec.Runner, name string) {
	t.Helper()
	var l net.Listener
	var u net.PacketConn
	if err := run.Do(func() error {
		var err error
		if l, err = net.Listen("tcp4", ":"+strconv.Itoa(namePort)); err != nil {
			return err
		}
		u, err = net.ListenPacket("udp4", ":"+strconv.Itoa(namePort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); u.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr()); err != nil {
					return
				}
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := fmt.Fprintf(c, "%s %s", name, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, addr, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = u.WriteTo([]byte(name+" "+addr.String()), addr)
		}
	}()
}

// askService connects (TCP) or sends (UDP) from run's namespace to dst
// and returns the answer: which backend, and the source it saw.
func askService(run *nsexec.Runner, proto string, dst netip.AddrPort) (name, seen string, err error) {
	var c net.Conn
	if err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout(proto+"4", dst.String(), 300*time.Millisecond)
		return err
	}); err != nil {
		return "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if proto == "udp" {
		if _, err := c.Write([]byte("probe")); err != nil {
			return "", "", err
		}
	}
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	if err != nil {
		return "", "", err
	}
	name, seen, _ = strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
	return name, seen, nil
}

// services feeds the Services and slices of a BPF load-balancing test.
func (f *sliceFeed) service(ns, name string, ip string, ports ...calc.ServiceSpecPort) {
	s := &calc.Service{ClusterIPs: []netip.Addr{netip.MustParseAddr(ip)}, Ports: ports}
	f.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindService, Namespace: ns, Name: name}, Value: s}}
}

func (f *sliceFeed) lbSlice(ns, name, svc string, ports []calc.ServicePort, eps ...calc.SliceEndpoint) {
	s := &calc.EndpointSlice{Service: svc, Ports: ports, Endpoints: eps}
	for _, e := range eps {
		s.Addresses = append(s.Addresses, e.Addr)
	}
	f.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlice, Namespace: ns, Name: name}, Value: s}}
}

func ready(ip string) calc.SliceEndpoint {
	return calc.SliceEndpoint{Addr: netip.MustParseAddr(ip), Ready: true, Serving: true}
}

// spread asks a frontend n times and returns how often each backend
// answered ("" for no answer) and the sources the backends saw.
func spread(run *nsexec.Runner, proto string, dst netip.AddrPort, n int) (map[string]int, map[string]bool, []error) {
	got, seen := map[string]int{}, map[string]bool{}
	var errs []error
	for range n {
		name, s, err := askService(run, proto, dst)
		if err != nil {
			errs = append(errs, err)
		}
		got[name]++
		if host, _, err := net.SplitHostPort(s); err == nil {
			seen[host] = true
		}
	}
	return got, seen, errs
}

// TestBPFServices: with real namespaces and packets, the eBPF dataplane
// load-balances Services itself (no kube-proxy in the namespace): a
// ClusterIP's TCP and UDP ports reach every backend on the target port
// the slices name (a named target port resolved per pod), the backend
// sees the client's own address and the client the ClusterIP as the
// source of the replies; egress policy judges the backend, not the
// ClusterIP; a Service without endpoints refuses at once (ICMP port
// unreachable, as kube-proxy's REJECT); a pod reaches itself through its
// Service (hairpin); an endpoint removed keeps the open connections to
// the other backends and resets the ones to it, and one added is used.
func TestBPFServices(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	feed := &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = feed
	runFelix(t, c.ctx, c.cancel, cfg)
	setupPods(c) // web 10.65.0.1 (ns-a), client 10.65.0.2 (ns-a), other 10.65.0.3 (ns-b)
	nameServer(t, c.pods["web"].run, "web")
	nameServer(t, c.pods["other"].run, "other")
	client := c.pods["client"].run

	vip := netip.MustParseAddr("10.96.0.10")
	httpF, dnsF := netip.AddrPortFrom(vip, 80), netip.AddrPortFrom(vip, 53)
	empty := netip.AddrPortFrom(netip.MustParseAddr("10.96.0.11"), 80)
	self := netip.AddrPortFrom(netip.MustParseAddr("10.96.0.12"), 80)
	feed.service("ns-a", "backend", vip.String(), calc.ServiceSpecPort{Name: "http", Proto: "tcp", Port: 80}, calc.ServiceSpecPort{Name: "dns", Proto: "udp", Port: 53})
	// The slices' ports are the target ports as resolved per pod: the
	// Service port "http" targets a port named so, 7070 on both pods.
	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "http"}, {Proto: "udp", Port: namePort, Name: "dns"}, {Proto: "tcp", Port: 9, Name: "unused"}}
	feed.lbSlice("ns-a", "backend-1", "backend", ports, ready("10.65.0.1"))
	feed.lbSlice("ns-a", "backend-2", "backend", ports, ready("10.65.0.3"),
		calc.SliceEndpoint{Addr: netip.MustParseAddr("10.65.0.99"), Ready: false, Serving: true})
	feed.service("ns-a", "empty", empty.Addr().String(), calc.ServiceSpecPort{Name: "", Proto: "tcp", Port: 80}, calc.ServiceSpecPort{Name: "", Proto: "udp", Port: 80})
	feed.service("ns-a", "self", self.Addr().String(), calc.ServiceSpecPort{Proto: "tcp", Port: 80})
	feed.lbSlice("ns-a", "self-1", "self", []calc.ServicePort{{Proto: "tcp", Port: namePort}}, ready("10.65.0.1"))
	feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}

	waitAnswer := func(proto string, dst netip.AddrPort) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, _, err := askService(client, proto, dst)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: no answer: %v", proto, dst, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAnswer("tcp", httpF)
	// Subtests fail through c.t too (its helpers).
	sub := func(name string, f func(t *testing.T)) {
		t.Run(name, func(st *testing.T) {
			c.t = st
			defer func() { c.t = t }()
			f(st)
		})
	}

	sub("ClusterIP: both backends, client address kept", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			dst := map[string]netip.AddrPort{"tcp": httpF, "udp": dnsF}[proto]
			got, seen, errs := spread(client, proto, dst, 40)
			if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
				t.Errorf("%s %s: answers %v (errors %v), want both web and other, none lost", proto, dst, got, errs)
			}
			if len(seen) != 1 || !seen["10.65.0.2"] {
				t.Errorf("%s %s: backends saw sources %v, want the client's 10.65.0.2 only", proto, dst, seen)
			}
		}
	})

	sub("policy judges the backend", func(t *testing.T) {
		rs := c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: client-to-web, namespace: ns-a}
spec:
  selector: app == 'client'
  types: [Egress]
  egress:
  - {action: Allow, protocol: TCP, destination: {selector: app == 'web', ports: [7070]}}
  - {action: Allow, protocol: TCP, destination: {nets: [10.96.0.10/32], ports: [80]}}
`)
		c.waitPolicies(rs, true)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _, _ := spread(client, "tcp", httpF, 30)
			if got["other"] == 0 && got["web"] > 0 && got[""] > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with egress allowed to web:7070 (and to the ClusterIP:80, which no packet carries after translation): answers %v, want web and refusals, never other", got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.remove(rs)
		c.waitPolicies(rs, false)
		waitAnswer("tcp", httpF)
	})

	sub("no endpoints: refused at once", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			began := time.Now()
			_, _, err := askService(client, proto, netip.AddrPortFrom(empty.Addr(), 80))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s to a Service without endpoints: %v, want connection refused", proto, err)
			}
			if d := time.Since(began); d > 200*time.Millisecond {
				t.Errorf("%s refused after %s, want at once", proto, d)
			}
		}
	})

	sub("hairpin", func(t *testing.T) {
		got, seen, errs := spread(c.pods["web"].run, "tcp", self, 10)
		if len(errs) > 0 || got["web"] != 10 {
			t.Errorf("web through its own Service: answers %v, errors %v", got, errs)
		}
		if len(seen) != 1 || !seen["169.254.1.1"] {
			t.Errorf("web saw its hairpin connections from %v, want 169.254.1.1", seen)
		}
	})

	sub("kube-proxy's iptables rules removed", func(t *testing.T) {
		kubeRules := func() bool {
			out := c.node.MustRun(t, "iptables-nft-save")
			return strings.Contains(out, "KUBE-")
		}
		// In one restore, as kube-proxy writes them: felix's cleanup
		// (every second here) never finds them half made.
		add := func() {
			cmd := c.node.Cmd("iptables-nft-restore", "--noflush")
			cmd.Stdin = strings.NewReader(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-TEST - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp --dport 80 -j KUBE-SVC-TEST
-A KUBE-SVC-TEST -p tcp -j DNAT --to-destination 10.65.0.3:8080
COMMIT
*filter
:KUBE-FORWARD - [0:0]
-A FORWARD -j KUBE-FORWARD
COMMIT
`)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kube-proxy's rules: %v: %s", err, out)
			}
		}
		add()
		c.waitFor("kube-proxy's rules removed (bpfKubeProxyIptablesCleanupEnabled by default)", func() bool { return !kubeRules() })
		c.applyFelixConfig("  bpfKubeProxyIptablesCleanupEnabled: false\n")
		time.Sleep(1500 * time.Millisecond) // the configuration reached felix
		add()
		time.Sleep(2500 * time.Millisecond) // iptablesRefreshInterval 1s: two refreshes
		if !kubeRules() {
			t.Errorf("kube-proxy's rules removed with bpfKubeProxyIptablesCleanupEnabled false")
		}
		// The programs translated before kube-proxy's DNAT could: the
		// ClusterIP still reaches both backends.
		got, _, errs := spread(client, "tcp", httpF, 30)
		if len(errs) > 0 || got["web"] == 0 || got["other"] == 0 {
			t.Errorf("with kube-proxy's rules present: answers %v, errors %v", got, errs)
		}
		c.applyFelixConfig("")
		c.waitFor("kube-proxy's rules removed again", func() bool { return !kubeRules() })
	})

	sub("endpoint changes: open flows kept, a removed backend's reset", func(t *testing.T) {
		// Open connections until both backends hold some.
		type flow struct {
			name string
			c    net.Conn
			r    *bufio.Reader
		}
		var flows []flow
		count := map[string]int{}
		for i := 0; i < 60 && (count["web"] < 2 || count["other"] < 2); i++ {
			var conn net.Conn
			if err := client.Do(func() error {
				var err error
				conn, err = net.DialTimeout("tcp4", httpF.String(), time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			r := bufio.NewReader(conn)
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			name, _, _ := strings.Cut(line, " ")
			flows = append(flows, flow{name, conn, r})
			count[name]++
		}
		// other leaves the Service; the Service's other port changes.
		feed.service("ns-a", "backend", vip.String(), calc.ServiceSpecPort{Name: "http", Proto: "tcp", Port: 80}, calc.ServiceSpecPort{Name: "dns", Proto: "udp", Port: 5353})
		feed.lbSlice("ns-a", "backend-2", "backend", ports)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _, _ := spread(client, "tcp", httpF, 10)
			if got["web"] == 10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after other left: answers %v, want web only", got)
			}
		}
		for i, f := range flows {
			_ = f.c.SetDeadline(time.Now().Add(time.Second))
			_, err := fmt.Fprintf(f.c, "ping %d\n", i)
			var line string
			if err == nil {
				line, err = f.r.ReadString('\n')
			}
			switch f.name {
			case "web":
				if err != nil || line != fmt.Sprintf("web ping %d\n", i) {
					t.Errorf("flow %d to web, which stayed: %q, %v", i, line, err)
				}
			case "other":
				if err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
					t.Errorf("flow %d to other, which left: %q, %v, want it reset (not answered, not hung)", i, line, err)
				}
			}
		}
		// other comes back: it is used again.
		feed.lbSlice("ns-a", "backend-2", "backend", ports, ready("10.65.0.3"))
		deadline = time.Now().Add(10 * time.Second)
		for {
			got, _, _ := spread(client, "tcp", httpF, 20)
			if got["other"] > 0 && got["web"] > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after other came back: answers %v, want both", got)
			}
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
