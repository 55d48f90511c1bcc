package felix

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
)

// sendRaw sends one UDP datagram with the given source address from a
// namespace through a raw socket (the kernel does not check the source).
func sendRaw(run *nsexec.Runner, src, dst netip.Addr, port int, payload []byte) error {
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40001)
	binary.BigEndian.PutUint16(udp[2:], uint16(port))
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	return run.Do(func() error {
		if src.Is4() {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			ip := make([]byte, 20)
			ip[0], ip[8], ip[9] = 0x45, 64, 17
			binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
			s, d := src.As4(), dst.As4()
			copy(ip[12:], s[:])
			copy(ip[16:], d[:])
			return unix.Sendto(fd, append(ip, udp...), 0, &unix.SockaddrInet4{Addr: d})
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 17, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		// The UDP checksum is mandatory in IPv6.
		sum := uint32(0)
		add := func(b []byte) {
			for i := 0; i+1 < len(b); i += 2 {
				sum += uint32(binary.BigEndian.Uint16(b[i:]))
			}
			if len(b)%2 == 1 {
				sum += uint32(b[len(b)-1]) << 8
			}
		}
		add(s[:])
		add(d[:])
		sum += uint32(len(udp)) + 17
		add(udp)
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(udp[6:], ^uint16(sum))
		return unix.Sendto(fd, append(ip, udp...), 0, &unix.SockaddrInet6{Addr: d})
	})
}

// receiver counts the datagrams a namespace receives on a port, by
// payload.
type receiver struct {
	conn net.PacketConn
	got  chan string
}

func listenUDP(t *testing.T, run *nsexec.Runner, network string, port int) *receiver {
	t.Helper()
	r := &receiver{got: make(chan string, 64)}
	if err := run.Do(func() error {
		var err error
		r.conn, err = net.ListenPacket(network, net.JoinHostPort("", strconv.Itoa(port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	go func() {
		buf := make([]byte, 256)
		for {
			n, _, err := r.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			r.got <- string(buf[:n])
		}
	}()
	return r
}

// arrives reports whether a datagram with payload arrives within d.
func (r *receiver) arrives(payload string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case p := <-r.got:
			if p == payload {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// TestBPFAntiSpoofing: a pod that forges its source address (another
// pod's, or one outside every pool) reaches nobody, IPv4 and IPv6, while
// the same packet with its own source gets through; the program counts
// the drops.
func TestBPFAntiSpoofing(t *testing.T) {
	c := newClusterIPv6(t, "BPF", true)
	c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd65::/64"}
`)
	c.addDualPod("ns-a", "web", "10.65.0.1", "fd65::1", map[string]string{"app": "web"}, "sa-w")
	c.addDualPod("ns-a", "client", "10.65.0.2", "fd65::2", map[string]string{"app": "client"}, "sa-x")
	c.addDualPod("ns-b", "other", "10.65.0.3", "fd65::3", map[string]string{"app": "client"}, "sa-y")
	web, client := c.pods["web"], c.pods["client"]
	for _, fam := range []struct {
		network        string
		own, dst, peer netip.Addr
		outside        netip.Addr
	}{
		{"udp4", client.ip, web.ip, c.pods["other"].ip, netip.MustParseAddr("192.0.2.7")},
		{"udp6", client.ip6, web.ip6, c.pods["other"].ip6, netip.MustParseAddr("2001:db8::7")},
	} {
		r := listenUDP(t, web.run, fam.network, 9200)
		// With its own address: delivered (the test can see delivery).
		c.waitFor("a datagram with the pod's own source", func() bool {
			return sendRaw(client.run, fam.own, fam.dst, 9200, []byte("own")) == nil && r.arrives("own", 200*time.Millisecond)
		})
		for _, forged := range []netip.Addr{fam.peer, fam.outside} {
			if err := sendRaw(client.run, forged, fam.dst, 9200, []byte("forged "+forged.String())); err != nil {
				t.Fatal(err)
			}
			if r.arrives("forged "+forged.String(), 500*time.Millisecond) {
				t.Errorf("a datagram from %s forging %s reached web", client.ip, forged)
			}
		}
	}
	t.Run("allowSpoofedSourcePrefixes", func(t *testing.T) {
		c.t = t
		defer func() { c.t = t }()
		c.apply(strings.Replace(c.felixConfig(), "ipv6Support: false", "ipv6Support: true", 1) + "  workloadSourceSpoofing: Any\n")
		wep, err := c.store.Get(c.ctx, datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: "ns-a", Name: names.WorkloadEndpointName(nodeName, "k8s", "client", "eth0")})
		if err != nil {
			t.Fatal(err)
		}
		w := wep.(*v3.WorkloadEndpoint)
		w.Spec.AllowSpoofedSourcePrefixes = []string{"192.0.2.0/24"}
		if _, err := c.store.Apply(c.ctx, w); err != nil {
			t.Fatal(err)
		}
		r := listenUDP(t, web.run, "udp4", 9201)
		c.waitFor("a datagram from an allowed spoofed source", func() bool {
			return sendRaw(client.run, netip.MustParseAddr("192.0.2.7"), web.ip, 9201, []byte("allowed")) == nil && r.arrives("allowed", 200*time.Millisecond)
		})
		if err := sendRaw(client.run, netip.MustParseAddr("192.0.3.7"), web.ip, 9201, []byte("outside")); err != nil {
			t.Fatal(err)
		}
		if r.arrives("outside", 500*time.Millisecond) {
			t.Error("a source outside allowSpoofedSourcePrefixes reached web")
		}
	})
	v, err := c.bpfView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	spoofed, err := v.ReasonPackets(client.iface, "dropped: source address not the workload's")
	if err != nil {
		t.Fatal(err)
	}
	if spoofed < 4 {
		t.Errorf("client's interface counted %d spoofed packets, want at least 4", spoofed)
	}
}

// TestICMPErrorOfEstablishedFlow: web, whose ingress policy allows only
// TCP 8080, sends UDP to a closed port outside; the ICMP port-unreachable
// that comes back is of a flow web opened, so it reaches web (its socket
// sees the connection refused), on both dataplanes.
func TestICMPErrorOfEstablishedFlow(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newCluster(t, dp)
			setupPods(c)
			rs := c.apply(core[1].yaml)
			c.waitPolicies(rs, true)
			c.expect(deny("ext", "web", "udp", 8080))
			web := c.pods["web"]
			var conn net.Conn
			if err := web.run.Do(func() error {
				var err error
				conn, err = net.Dial("udp4", netip.AddrPortFrom(extAddr, 9999).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			refused := false
			for i := 0; i < 20 && !refused; i++ {
				_, _ = conn.Write([]byte("x"))
				_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				_, err := conn.Read(make([]byte, 8))
				refused = errors.Is(err, syscall.ECONNREFUSED)
			}
			if !refused {
				t.Fatal("the ICMP port unreachable of web's own flow did not reach web")
			}
			if c.bpf {
				v, err := c.bpfView()
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				cs, _ := v.Counters()
				related := uint64(0)
				for _, ct := range cs {
					if ct.Stage == palbpf.StageGeneral && palbpf.Reasons[ct.Rule] == "allowed: ICMP error of a tracked flow" {
						related += ct.Packets
					}
				}
				if related == 0 {
					t.Error("no ICMP error counted as related")
				}
			}
		})
	}
}
