package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// askUDP sends a datagram from a lab namespace to dst on an unconnected
// socket, every 100 ms until an answer comes or timeout passes, and
// returns the answer (a served pod's name) and the address it came from.
func askUDP(ctx context.Context, l *Lab, from string, dst netip.AddrPort, timeout time.Duration) (string, netip.AddrPort, error) {
	var c net.PacketConn
	if err := l.InNamespace(from, func() (err error) {
		c, err = net.ListenPacket("udp4", "0.0.0.0:0")
		return err
	}); err != nil {
		return "", netip.AddrPort{}, fmt.Errorf("udp from %s: %w", from, err)
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 256)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := c.WriteTo([]byte("who"), net.UDPAddrFromAddrPort(dst)); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		wait := time.Now().Add(100 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		n, peer, err := c.ReadFrom(buf)
		if err != nil {
			continue
		}
		return string(buf[:n]), peer.(*net.UDPAddr).AddrPort(), nil
	}
	return "", netip.AddrPort{}, fmt.Errorf("udp %s → %s: no answer in %s", from, dst, timeout)
}

// birdFromRE finds the protocol (the peer) of each route in `birdc show
// route … all`.
var birdFromRE = regexp.MustCompile(`unicast \[(\S+) `)

// TestFloatingIP runs a floating IP against the real apiserver on three
// nodes with a border router. A pod on node2 annotated with a floating IP
// answers at it (ICMP and UDP replies from the floating address, the
// answer naming the pod) to pods on every node and to the border router;
// the border learns the /32 from node2 only and the other nodes route it
// to node2. The pod re-created on node3 with the same annotation: the
// /32 moves to node3 and traffic follows. floatingIPs Disabled: the
// route is withdrawn and nothing answers at the floating address, while
// the pod's own address still does.
func TestFloatingIP(t *testing.T) {
	requireLab(t)
	l := newLab(t, Options{Name: "tfip", Nodes: 3, Kubernetes: true, Border: true, FloatingIPs: true, KubeBinDir: kubetest.Bin(t)})
	ctx := context.Background()
	const ns, port = "float", 8081
	b := netip.MustParsePrefix(FloatingPoolCIDR).Addr().As4()
	b[3] = 9
	fip := netip.AddrFrom4(b)
	host := netip.PrefixFrom(fip, 32)
	nodeIP := map[string]netip.Addr{}
	var clients []string
	for i, n := range l.Nodes() {
		nodeIP[n.Name] = n.IP
		c := fmt.Sprintf("c-%d", i+1)
		if _, err := l.AddPod(ctx, n.Name, ns, c); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, ns+"/"+c)
	}
	sources := append(slices.Clone(clients), "border")
	addWeb := func(node string) Pod {
		t.Helper()
		p, err := l.AddPodWith(ctx, node, ns, "web", PodOptions{
			Serve:       []ServePort{{port, ProtoUDP}},
			Annotations: map[string]string{k8s.AnnotationFloatingIPs: fmt.Sprintf("[%q]", fip)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// advertisedBy waits until the border's routes for the /32 come from
	// exactly these nodes (none: withdrawn), with the hosting node's
	// address as next hop, and the other nodes route it there.
	advertisedBy := func(nodes ...string) {
		t.Helper()
		waitFor(t, 60*time.Second, fmt.Sprintf("the border router has %s from %v only", host, nodes), func() (bool, string) {
			// A filter, not the prefix: birdc fails when a prefix has
			// no route, and a withdrawn route must not look like that.
			out, err := l.Bird(ctx, "border", "show", "route", "where", "net", "=", host.String(), "all")
			if err != nil {
				return false, err.Error()
			}
			var from []string
			for _, m := range birdFromRE.FindAllStringSubmatch(out, -1) {
				from = append(from, m[1])
			}
			var want []string
			for _, n := range nodes {
				want = append(want, birdSymbol(n))
			}
			if !slices.Equal(from, want) {
				return false, out
			}
			for _, n := range nodes {
				if !strings.Contains(out, "BGP.next_hop: "+nodeIP[n].String()) {
					return false, out
				}
			}
			return true, out
		})
		for _, n := range l.Nodes() {
			waitFor(t, 30*time.Second, fmt.Sprintf("%s's BGP routes for %s agree (hosted on %v)", n.Name, host, nodes), func() (bool, string) {
				rs, err := l.BGPRoutes(ctx, n.Name)
				if err != nil {
					return false, err.Error()
				}
				has := slices.ContainsFunc(rs, func(r BGPRoute) bool { return r.Prefix == host })
				switch {
				case len(nodes) == 0 || nodes[0] == n.Name:
					return !has, fmt.Sprint(rs)
				default:
					return has && routeVia(rs, fip, nodeIP[nodes[0]]), fmt.Sprint(rs)
				}
			})
		}
	}
	// answers checks that every source reaches web at the floating IP:
	// ICMP echo replies and UDP answers come from the floating address,
	// and the answer names the pod (its server answers with its key).
	answers := func(web Pod, why string) {
		t.Helper()
		for _, src := range sources {
			if _, err := l.Ping(ctx, src, fip, 30*time.Second); err != nil {
				t.Fatalf("%s: %v", why, err)
			}
			name, peer, err := askUDP(ctx, l, src, netip.AddrPortFrom(fip, port), 30*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", why, err)
			}
			if name != web.Key() || peer != netip.AddrPortFrom(fip, port) {
				t.Fatalf("%s: %s asked %s:%d: answer %q from %s, want %q from the floating address", why, src, fip, port, name, peer, web.Key())
			}
		}
	}

	web := addWeb("node2")
	advertisedBy("node2")
	answers(web, "web on node2")

	// Re-created on node3: the /32 and the traffic move there.
	if err := l.DelPod(ctx, web.Key()); err != nil {
		t.Fatal(err)
	}
	web = addWeb("node3")
	advertisedBy("node3")
	answers(web, "web re-created on node3")

	// floatingIPs Disabled: withdrawn, and nothing answers at the
	// floating address (its own address still does).
	if err := l.Apply(ctx, strings.Replace(floatingConfig(false, false), "floatingIPs: Enabled", "floatingIPs: Disabled", 1)); err != nil {
		t.Fatal(err)
	}
	advertisedBy()
	for _, src := range sources {
		waitFor(t, 30*time.Second, src+" gets no answer at the floating address", func() (bool, string) {
			_, err := l.Ping(ctx, src, fip, 300*time.Millisecond)
			return err != nil, "answered"
		})
	}
	for _, src := range sources {
		if rtt, err := l.Ping(ctx, src, fip, 2*time.Second); err == nil {
			t.Errorf("floatingIPs Disabled: %s still gets ICMP replies from %s (%s)", src, fip, rtt)
		}
		if name, peer, err := askUDP(ctx, l, src, netip.AddrPortFrom(fip, port), time.Second); err == nil {
			t.Errorf("floatingIPs Disabled: %s still gets an answer %q from %s", src, name, peer)
		}
		if name, _, err := askUDP(ctx, l, src, netip.AddrPortFrom(web.IP, port), 30*time.Second); err != nil || name != web.Key() {
			t.Errorf("floatingIPs Disabled: %s does not reach web at its own address %s: %q, %v", src, web.IP, name, err)
		}
	}
}
