package felix

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// tcpEcho serves one-byte echoes on port in run's namespace until the
// test ends.
func tcpEcho(t *testing.T, run *nsexec.Runner, port int) {
	t.Helper()
	var l net.Listener
	if err := run.Do(func() error {
		var err error
		l, err = net.Listen("tcp", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// echoConn is an open connection to a tcpEcho server.
type echoConn struct{ net.Conn }

// dialIn opens a TCP connection from run's namespace to dst.
func dialIn(run *nsexec.Runner, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := run.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), 2*time.Second)
		return err
	})
	return c, err
}

func dialEcho(t *testing.T, run *nsexec.Runner, dst netip.AddrPort) echoConn {
	t.Helper()
	c, err := dialIn(run, dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return echoConn{c}
}

// exchange makes n one-byte exchanges, each answered within a second.
func (c echoConn) exchange(n int) error {
	b := []byte{'x'}
	for i := range n {
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(b); err != nil {
			return fmt.Errorf("exchange %d: %w", i, err)
		}
		if _, err := c.Read(b); err != nil {
			return fmt.Errorf("exchange %d: %w", i, err)
		}
	}
	return nil
}

// roundTrips opens one TCP connection from run's namespace to dst and
// makes n one-byte request/response exchanges over it.
func roundTrips(run *nsexec.Runner, dst netip.AddrPort, n int) error {
	c, err := dialIn(run, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b := []byte{'x'}
	for i := range n {
		if _, err := c.Write(b); err != nil {
			return fmt.Errorf("exchange %d: %w", i, err)
		}
		if _, err := c.Read(b); err != nil {
			return fmt.Errorf("exchange %d: %w", i, err)
		}
	}
	return nil
}

// forwardCounter is a rule without a target at the top of mangle FORWARD
// that counts the packets of src → dst the kernel forwarded.
type forwardCounter struct {
	c    *cluster
	cmd  string // iptables-nft or ip6tables-nft
	args []string
}

func (c *cluster) countForwarded(src, dst netip.Addr) *forwardCounter {
	c.t.Helper()
	f := &forwardCounter{c: c, cmd: "iptables-nft", args: []string{"-s", src.String() + "/32", "-d", dst.String() + "/32", "-p", "tcp"}}
	if src.Is6() {
		f.cmd, f.args[1], f.args[3] = "ip6tables-nft", src.String()+"/128", dst.String()+"/128"
	}
	c.node.MustRun(c.t, append([]string{f.cmd, "-t", "mangle", "-I", "FORWARD"}, f.args...)...)
	return f
}

// packets reads the rule's packet count.
func (f *forwardCounter) packets() uint64 {
	f.c.t.Helper()
	out := f.c.node.MustRun(f.c.t, f.cmd+"-save", "-c", "-t", "mangle")
	rule := "-A FORWARD " + strings.Join(f.args, " ")
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasSuffix(line, rule) {
			continue
		}
		if m := counterRe.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseUint(m[1], 10, 64)
			if err != nil {
				f.c.t.Fatal(err)
			}
			return n
		}
	}
	f.c.t.Fatalf("no counting rule %q in %s mangle:\n%s", rule, f.cmd, out)
	return 0
}

func (f *forwardCounter) remove() {
	f.c.node.MustRun(f.c.t, append([]string{f.cmd, "-t", "mangle", "-D", "FORWARD"}, f.args...)...)
}

// forwardedByProgram is the packets the eBPF programs sent on themselves
// (host conntrack bypass) from an interface.
func (c *cluster) forwardedByProgram(iface string) uint64 {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	n, err := v.ReasonPackets(iface, palbpf.ReasonForwarded)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// txPackets is the packets an interface of the node transmitted.
func (c *cluster) txPackets(iface string) uint64 {
	c.t.Helper()
	l, err := c.nodeH.LinkByName(iface)
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Attrs().Statistics.TxPackets
}

// hostConntrackLeft lists the seconds left of the node's conntrack
// entries of TCP flows src → dst:port (/proc/net/nf_conntrack).
func hostConntrackLeft(t *testing.T, c *cluster, src, dst netip.Addr, port int) []int {
	t.Helper()
	out := c.node.MustRun(t, "cat", "/proc/net/nf_conntrack")
	var left []int
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) < 6 || fs[2] != "tcp" || !strings.Contains(line, "src="+src.String()+" dst="+dst.String()+" ") ||
			!strings.Contains(line, " dport="+strconv.Itoa(port)+" ") {
			continue
		}
		n, err := strconv.Atoi(fs[4])
		if err != nil {
			t.Fatalf("conntrack line %q: %v", line, err)
		}
		left = append(left, n)
	}
	return left
}

// receivedTTL sends datagrams over a connected UDP socket from run to
// dst, where a socket asking for IP_RECVTTL (IPv6: IPV6_RECVHOPLIMIT)
// reads them, and returns the TTLs they arrived with (the sender's is
// 64). The receiver answers each, so the flow has its reply.
func receivedTTL(t *testing.T, from, to *nsexec.Runner, dst netip.AddrPort, rounds int) []int {
	t.Helper()
	family, level, recv, send := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, unix.IPV6_UNICAST_HOPS
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
	var bind unix.Sockaddr = &unix.SockaddrInet6{Port: int(dst.Port())}
	if dst.Addr().Is4() {
		family, level, recv, send = unix.AF_INET, unix.IPPROTO_IP, unix.IP_RECVTTL, unix.IP_TTL
		sa, bind = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}, &unix.SockaddrInet4{Port: int(dst.Port())}
	}
	// socket makes a datagram socket in run's namespace, sets an option
	// on it and binds or connects it.
	socket := func(run *nsexec.Runner, opt, val int, then func(fd int) error) int {
		var fd int
		if err := run.Do(func() error {
			var err error
			if fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			if err := unix.SetsockoptInt(fd, level, opt, val); err != nil {
				return err
			}
			return then(fd)
		}); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	srv := socket(to, recv, 1, func(fd int) error { return unix.Bind(fd, bind) })
	defer unix.Close(srv)
	cli := socket(from, send, 64, func(fd int) error { return unix.Connect(fd, sa) })
	defer unix.Close(cli)
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	_ = unix.SetsockoptTimeval(srv, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptTimeval(cli, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var ttls []int
	buf, oob := make([]byte, 16), make([]byte, 64)
	for i := range rounds {
		if _, err := unix.Write(cli, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		_, oobn, _, from, err := unix.Recvmsg(srv, buf, oob, 0)
		if err != nil {
			t.Fatalf("datagram %d not received: %v", i, err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 || len(msgs[0].Data) == 0 {
			t.Fatalf("datagram %d: no TTL (%v)", i, err)
		}
		// IP_TTL is one byte, IPV6_HOPLIMIT a native int: its first
		// byte either way on this little-endian machine.
		ttls = append(ttls, int(msgs[0].Data[0]))
		if err := unix.Sendto(srv, buf[:1], 0, from); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Read(cli, buf); err != nil {
			t.Fatalf("answer %d not received: %v", i, err)
		}
	}
	return ttls
}

// checkBypassed makes n exchanges from client to a server on dst (and
// datagrams for their TTL) and checks the programs sent the flow on:
// netfilter saw only its handshake, the TTL dropped by one.
func checkBypassed(t *testing.T, c *cluster, client *pod, to *nsexec.Runner, dst netip.Addr, n int) {
	t.Helper()
	fw := c.countForwarded(addrOfFamily(client, dst), dst)
	defer fw.remove()
	before := c.forwardedByProgram(client.iface)
	if err := roundTrips(client.run, netip.AddrPortFrom(dst, 9300), n); err != nil {
		t.Fatal(err)
	}
	if got := fw.packets(); got > 10 {
		t.Errorf("netfilter forwarded %d packets of %s → %s for %d exchanges; want only the handshake's", got, client.name, dst, n)
	}
	if got := c.forwardedByProgram(client.iface) - before; got < uint64(n-10) {
		t.Errorf("the program sent on %d packets from %s, want at least %d", got, client.name, n-10)
	}
	for i, ttl := range receivedTTL(t, client.run, to, netip.AddrPortFrom(dst, 9301), 20) {
		if ttl != 63 {
			t.Errorf("datagram %d to %s arrived with TTL %d, want 63 (one hop)", i, dst, ttl)
		}
	}
}

func addrOfFamily(p *pod, like netip.Addr) netip.Addr {
	if like.Is6() {
		return p.ip6
	}
	return p.ip
}

// bypassCluster is a node on the eBPF dataplane with the usual pods, web
// and client programmed, and web echoing on TCP port 9300.
func bypassCluster(t *testing.T) (c *cluster, web, client *pod) {
	c = newCluster(t, "BPF")
	setupPods(c)
	web, client = c.pods["web"], c.pods["client"]
	c.waitProgrammed("ns-a", web.wep.Name)
	c.waitProgrammed("ns-a", client.wep.Name)
	tcpEcho(t, web.run, 9300)
	return c, web, client
}

// TestBPFHostConntrackBypass: with bpfHostConntrackBypass (Calico's
// default, true), the packets of an established flow that the host's
// conntrack tracks untranslated are sent on by the programs themselves —
// pod to pod and pod to a host beyond the node — with the TTL decremented
// once, so netfilter sees only the handshake; a flow that is translated
// (a DNAT as kube-proxy writes, natOutgoing's masquerade) takes the
// kernel's path for every packet and keeps working; turned off, every
// packet takes the kernel's path.
func TestBPFHostConntrackBypass(t *testing.T) {
	c, web, client := bypassCluster(t)
	tcpEcho(t, c.extRun, 9300)
	const n = 200

	t.Run("pod to pod", func(t *testing.T) {
		c.t = t
		txBefore := c.txPackets(web.iface)
		checkBypassed(t, c, client, web.run, web.ip, n)
		// Straight into web's namespace (bpf_redirect_peer): its veth's
		// host side did not transmit them.
		if tx := c.txPackets(web.iface) - txBefore; tx > 60 {
			t.Errorf("web's veth transmitted %d packets for %d exchanges and 20 datagrams; want them delivered to its peer directly", tx, n)
		}
		if got := c.forwardedByProgram(web.iface); got < n-10 {
			t.Errorf("the program sent on %d packets from web, want at least %d", got, n-10)
		}
		// The closed flows' host conntrack entries saw no FIN, yet they
		// expire with ours (30 s after both FINs), not in 5 days.
		c.waitFor("the host's conntrack entries of the closed flows to expire soon", func() bool {
			left := hostConntrackLeft(t, c, client.ip, web.ip, 9300)
			for _, s := range left {
				if s > 30 {
					return false
				}
			}
			return len(left) > 0
		})
	})

	t.Run("pod to a host beyond the node", func(t *testing.T) {
		c.t = t
		checkBypassed(t, c, client, c.extRun, extAddr, n)
	})

	t.Run("a host beyond the node to a pod, by the data interface", func(t *testing.T) {
		c.t = t
		// eth-ext matches bpfDataIfacePattern's default (eth.*).
		if k := c.ifaceKind("eth-ext"); k != "data" {
			t.Fatalf("eth-ext is %q in the eBPF dataplane, want data", k)
		}
		fw := c.countForwarded(extAddr, web.ip)
		defer fw.remove()
		before := c.forwardedByProgram("eth-ext")
		if err := roundTrips(c.extRun, netip.AddrPortFrom(web.ip, 9300), n); err != nil {
			t.Fatal(err)
		}
		if got := fw.packets(); got > 10 {
			t.Errorf("netfilter forwarded %d packets of ext → web for %d exchanges; want only the handshake's", got, n)
		}
		if got := c.forwardedByProgram("eth-ext") - before; got < n-10 {
			t.Errorf("the data interface's program sent on %d packets, want at least %d", got, n-10)
		}
		for i, ttl := range receivedTTL(t, c.extRun, web.run, netip.AddrPortFrom(web.ip, 9302), 20) {
			if ttl != 63 {
				t.Errorf("datagram %d from ext arrived with TTL %d, want 63 (one hop)", i, ttl)
			}
		}
	})

	t.Run("DNAT as kube-proxy writes it", func(t *testing.T) {
		c.t = t
		vip := netip.MustParseAddr("10.96.0.10")
		// A node routes the service range somewhere (its default route):
		// without a route the programs take a ClusterIP for the host.
		c.node.MustRun(t, "ip", "route", "add", "10.96.0.0/12", "via", extAddr.String())
		defer c.node.MustRun(t, "ip", "route", "del", "10.96.0.0/12")
		rule := []string{"PREROUTING", "-d", vip.String() + "/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", web.ip.String() + ":9300"}
		c.node.MustRun(t, append([]string{"iptables-nft", "-t", "nat", "-I"}, rule...)...)
		defer c.node.MustRun(t, append([]string{"iptables-nft", "-t", "nat", "-D"}, rule...)...)
		fw := c.countForwarded(client.ip, web.ip)
		defer fw.remove()
		if err := roundTrips(client.run, netip.AddrPortFrom(vip, 80), n); err != nil {
			t.Fatal(err)
		}
		if got := fw.packets(); got < n {
			t.Errorf("netfilter forwarded %d packets of the translated flow for %d exchanges; want every one", got, n)
		}
	})

	t.Run("natOutgoing", func(t *testing.T) {
		c.t = t
		c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16, natOutgoing: true}
`)
		c.waitFor("natOutgoing's masquerade", func() bool {
			out, _ := c.node.Run("iptables-nft-save", "-t", "nat")
			return strings.Contains(out, "MASQUERADE")
		})
		fw := c.countForwarded(client.ip, extAddr)
		defer fw.remove()
		if err := roundTrips(client.run, netip.AddrPortFrom(extAddr, 9300), n); err != nil {
			t.Fatal(err)
		}
		if got := fw.packets(); got < n {
			t.Errorf("netfilter forwarded %d packets of the masqueraded flow for %d exchanges; want every one", got, n)
		}
	})

	// kube-proxy (iptables mode) drops what the host's conntrack finds
	// INVALID; so does the iptables dataplane.
	invalid := []string{"FORWARD", "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"}
	c.node.MustRun(t, append([]string{"iptables-nft", "-t", "filter", "-I"}, invalid...)...)
	// A connection that lives on across the changes below.
	long := dialEcho(t, client.run, netip.AddrPortFrom(web.ip, 9300))
	if err := long.exchange(n); err != nil {
		t.Fatal(err)
	}

	t.Run("off", func(t *testing.T) {
		c.t = t
		c.apply(c.felixConfig() + "  bpfHostConntrackBypass: false\n")
		// The slot is emptied at the next apply: wait until a fresh
		// flow is no longer sent on by the program.
		c.waitFor("established packets on the kernel's path", func() bool {
			before := c.forwardedByProgram(client.iface)
			return roundTrips(client.run, netip.AddrPortFrom(web.ip, 9300), 20) == nil && c.forwardedByProgram(client.iface) == before
		})
		fw := c.countForwarded(client.ip, web.ip)
		defer fw.remove()
		if err := roundTrips(client.run, netip.AddrPortFrom(web.ip, 9300), n); err != nil {
			t.Fatal(err)
		}
		if got := fw.packets(); got < n {
			t.Errorf("bypass off: netfilter forwarded %d packets for %d exchanges; want every one", got, n)
		}
		// The connection bypassed until now goes on through netfilter:
		// its host entry, stale, was forgotten and picked up afresh.
		if err := long.exchange(n); err != nil {
			t.Errorf("a connection open across the bypass turned off: %v", err)
		}
	})

	t.Run("on again, then the iptables dataplane", func(t *testing.T) {
		c.t = t
		c.apply(c.felixConfig())
		c.waitFor("established packets sent on by the program again", func() bool {
			before := c.forwardedByProgram(client.iface)
			return long.exchange(20) == nil && c.forwardedByProgram(client.iface) > before
		})
		if err := long.exchange(n); err != nil {
			t.Fatal(err)
		}
		c.apply(strings.Replace(c.felixConfig(), "  bpfEnabled: true\n", "", 1))
		c.waitFor("the eBPF dataplane removed", func() bool { _, err := c.bpfView(); return err != nil })
		if err := long.exchange(n); err != nil {
			t.Errorf("a connection open across the switch to iptables: %v", err)
		}
	})
}

// TestBPFHostConntrackBypassIPv6: the bypass over IPv6, pod to pod, hop
// limit decremented once.
func TestBPFHostConntrackBypassIPv6(t *testing.T) {
	c := newClusterIPv6(t, "BPF", true)
	c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd65::/64"}
`)
	web := c.addDualPod("ns-a", "web", "10.65.0.1", "fd65::1", map[string]string{"app": "web"}, "sa-w")
	client := c.addDualPod("ns-a", "client", "10.65.0.2", "fd65::2", map[string]string{"app": "client"}, "sa-x")
	tcpEcho(t, web.run, 9300)
	checkBypassed(t, c, client, web.run, web.ip6, 200)

	// From an L3 device (bpfL3IfacePattern), given an Ethernet header
	// with IPv6's type: to the peer with bpfRedirectToPeer Enabled, by
	// the host side with L2Only.
	tun := newTunHost(t, c, "tunpal0", netip.MustParseAddr("fd66::7"))
	dst := netip.AddrPortFrom(web.ip6, 8080)
	for _, mode := range []string{"Enabled", "L2Only"} {
		c.apply(c.felixConfig() + "  bpfL3IfacePattern: '^tunpal0$'\n  bpfRedirectToPeer: " + mode + "\n")
		fromTun := tun.probe(c, web, dst)
		c.waitFor("the tun's flow to web sent on by the program, "+mode, func() bool {
			fw, tx := fromTun(20)
			if mode == "Enabled" {
				return fw >= 19 && tx < 5
			}
			return fw >= 19 && tx >= 20
		})
	}
}

// tunHost is a host beyond the node reached over an L3 device: a tun
// interface of the node's (no Ethernet header) whose other end is the
// test, writing and reading the host's IPv4 or IPv6 packets.
type tunHost struct {
	f    *os.File
	name string
	addr netip.Addr
}

// newTunHost makes the tun interface name in the node's namespace, up,
// with a route to addr by it; it goes when the test ends.
func newTunHost(t *testing.T, c *cluster, name string, addr netip.Addr) *tunHost {
	t.Helper()
	fd := -1
	err := c.nodeRun.Do(func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Skipf("no tun device: %v", err)
	}
	h := &tunHost{f: os.NewFile(uintptr(fd), name), name: name, addr: addr}
	t.Cleanup(func() { h.f.Close() })
	c.node.MustRun(t, "ip", "link", "set", name, "up")
	c.node.MustRun(t, "ip", "route", "add", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", name)
	return h
}

// probe returns a probe of the tun's host's flow (UDP, from port 4000)
// to web's dst: it makes n exchanges and returns the packets the tun's
// program sent on and web's veth transmitted meanwhile.
func (h *tunHost) probe(c *cluster, web *pod, dst netip.AddrPort) func(n int) (forwarded, tx uint64) {
	return func(n int) (forwarded, tx uint64) {
		c.t.Helper()
		fw0, tx0 := c.forwardedByProgram(h.name), c.txPackets(web.iface)
		for i := range n {
			got, err := h.exchange(4000, dst, []byte("x"))
			if err != nil {
				c.t.Fatalf("exchange %d from the tun's host: %v", i, err)
			}
			if want := netip.AddrPortFrom(h.addr, 4000).String(); string(got) != want {
				c.t.Fatalf("exchange %d: web answered %q, want %q", i, got, want)
			}
		}
		return c.forwardedByProgram(h.name) - fw0, c.txPackets(web.iface) - tx0
	}
}

// exchange sends a UDP datagram from the host's port sport to dst (of
// the host's family) and returns the payload of the first answer from
// dst, ignoring other packets the node sends by the tun.
func (h *tunHost) exchange(sport uint16, dst netip.AddrPort, payload []byte) ([]byte, error) {
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	var pkt []byte
	if h.addr.Is4() {
		// UDP checksum 0: none (IPv4).
		pkt = make([]byte, 20, 20+len(udp))
		pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP
		binary.BigEndian.PutUint16(pkt[2:], uint16(20+len(udp)))
		src, daddr := h.addr.As4(), dst.Addr().As4()
		copy(pkt[12:], src[:])
		copy(pkt[16:], daddr[:])
		binary.BigEndian.PutUint16(pkt[10:], nstest.Checksum(pkt))
	} else {
		pkt = make([]byte, 40, 40+len(udp))
		pkt[0], pkt[6], pkt[7] = 0x60, unix.IPPROTO_UDP, 64
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(udp)))
		src, daddr := h.addr.As16(), dst.Addr().As16()
		copy(pkt[8:], src[:])
		copy(pkt[24:], daddr[:])
		// The checksum over the pseudo-header: the addresses, the
		// length, the next header.
		pseudo := append(append(append([]byte{}, pkt[8:40]...), 0, 0, pkt[4], pkt[5], 0, 0, 0, unix.IPPROTO_UDP), udp...)
		binary.BigEndian.PutUint16(udp[6:], nstest.Checksum(pseudo))
	}
	pkt = append(pkt, udp...)
	if _, err := h.f.Write(pkt); err != nil {
		return nil, err
	}
	_ = h.f.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	for {
		n, err := h.f.Read(buf)
		if err != nil {
			return nil, err
		}
		b := buf[:n]
		var from netip.Addr
		l4 := 0
		switch {
		case n >= 28 && b[0]>>4 == 4 && b[9] == unix.IPPROTO_UDP:
			from, l4 = netip.AddrFrom4([4]byte(b[12:16])), int(b[0]&0xf)*4
		case n >= 48 && b[0]>>4 == 6 && b[6] == unix.IPPROTO_UDP:
			from, l4 = netip.AddrFrom16([16]byte(b[8:24])), 40
		default:
			continue
		}
		if n < l4+8 || from != dst.Addr() || binary.BigEndian.Uint16(b[l4:]) != dst.Port() || binary.BigEndian.Uint16(b[l4+2:]) != sport {
			continue
		}
		return b[l4+8:], nil
	}
}

// TestBPFRedirectToPeer: FelixConfiguration bpfRedirectToPeer, as in
// Calico. By default (L2Only) the host conntrack bypass sends a packet
// that arrived with an Ethernet header straight to a veth workload's
// peer (the host side does not transmit it), and one from an L3 device
// by the host side; Enabled sends those from an L3 device (given an
// Ethernet header) to the peer too; Disabled sends every one by the
// host side, where the workload's program takes it. In every mode the
// flow bypasses netfilter and arrives. The tun is a data interface by
// bpfL3IfacePattern.
func TestBPFRedirectToPeer(t *testing.T) {
	c, web, client := bypassCluster(t)
	tun := newTunHost(t, c, "tunpal0", netip.MustParseAddr("198.18.7.7"))
	dst := netip.AddrPortFrom(web.ip, 8080)
	const n = 100

	fromTun := tun.probe(c, web, dst)
	// fromPod is the same for n exchanges from client to web.
	fromPod := func(n int) (forwarded, tx uint64) {
		c.t.Helper()
		fw0, tx0 := c.forwardedByProgram(client.iface), c.txPackets(web.iface)
		if err := roundTrips(client.run, netip.AddrPortFrom(web.ip, 9300), n); err != nil {
			c.t.Fatal(err)
		}
		return c.forwardedByProgram(client.iface) - fw0, c.txPackets(web.iface) - tx0
	}
	setMode := func(mode string) {
		cfg := c.felixConfig() + "  bpfL3IfacePattern: '^tunpal0$'\n"
		if mode != "" {
			cfg += "  bpfRedirectToPeer: " + mode + "\n"
		}
		c.apply(cfg)
	}
	// sentAs reports whether the program sent a probe's packets on, to
	// web's peer (its veth transmitted next to none of them) or by its
	// host side (every one).
	sentAs := func(probe func(int) (uint64, uint64), peer bool) bool {
		fw, tx := probe(20)
		if peer {
			return fw >= 15 && tx < 5
		}
		return fw >= 15 && tx >= 20
	}

	setMode("")
	c.waitFor("tunpal0 a data interface", func() bool { return c.ifaceKind("tunpal0") == "data" })
	cases := []struct {
		mode            string
		podPeer, l3Peer bool
	}{
		{"", true, false},
		{"Enabled", true, true},
		{"L2Only", true, false},
		{"Disabled", false, false},
	}
	for _, tc := range cases {
		name := tc.mode
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			c.t = t
			setMode(tc.mode)
			c.waitFor("the mode in place", func() bool {
				return sentAs(fromTun, tc.l3Peer) && sentAs(fromPod, tc.podPeer)
			})
			for _, p := range []struct {
				from  string
				probe func(int) (uint64, uint64)
				peer  bool
			}{{"the tun's host", fromTun, tc.l3Peer}, {"client", fromPod, tc.podPeer}} {
				fw, tx := p.probe(n)
				// A TCP flow's handshake and FINs take the kernel's path.
				if fw < n-5 {
					t.Errorf("from %s: the program sent on %d packets of %d exchanges, want at least %d", p.from, fw, n, n-5)
				}
				if p.peer && tx > 10 {
					t.Errorf("from %s: web's veth transmitted %d packets of %d exchanges, want them sent to its peer", p.from, tx, n)
				}
				if !p.peer && tx < n {
					t.Errorf("from %s: web's veth transmitted %d packets of %d exchanges, want every one sent by it", p.from, tx, n)
				}
			}
		})
	}
}
