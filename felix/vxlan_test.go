package felix

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// vxlanFrame is a VXLAN datagram's payload (VNI 4096) carrying an
// Ethernet frame to dstMAC with an IPv4 UDP datagram from src to
// dst:port holding payload: what a node sends to deliver a packet from a
// remote pod, and what an attacker would forge.
func vxlanFrame(dstMAC net.HardwareAddr, src, dst netip.Addr, port int, payload string) string {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], uint16(port))
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...) // checksum 0: none, valid for IPv4
	ip := make([]byte, 20, 20+len(udp))
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[12:], src.AsSlice())
	copy(ip[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], nstest.Checksum(ip))
	ip = append(ip, udp...)
	eth := append(append(append([]byte{}, dstMAC...), 0xee, 0xee, 0xee, 0x00, 0x00, 0x01), 0x08, 0x00)
	vx := []byte{0x08, 0, 0, 0, 0x00, 0x10, 0x00, 0} // flags I, VNI 4096
	return string(append(append(vx, eth...), ip...))
}

// TestVXLANInjection sends real VXLAN packets at a node with a VXLAN
// pool: from a host that is not a node, from a host at a node's address,
// and from a pod (to the node itself and forwarded to another host). As
// Calico, only the nodes' (and externalNodesList's) VXLAN is decapsulated;
// workloads' VXLAN is dropped, and forwarded only with
// allowVXLANPacketsFromWorkloads.
// defaultEndpointToHostAction is Accept (Calico's Kubernetes manifests
// set it so), which would otherwise let a pod's VXLAN reach the device.
func TestVXLANInjection(t *testing.T) {
	for _, dp := range dataplanes {
		t.Run(dp, func(t *testing.T) {
			c := newCluster(t, dp)
			config := func(extra string) { c.applyFelixConfig("  defaultEndpointToHostAction: Accept\n" + extra) }
			config("")
			// node-b is at 198.18.0.3, an address of the external
			// namespace: a known node's VXLAN comes from there.
			c.ext.MustRun(t, "ip", "addr", "add", "198.18.0.3/24", "dev", "eth0")
			c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.65.0.0/16, vxlanMode: Always}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec:
  bgp: {ipv4Address: 198.18.0.1/24}
  ipv4VXLANTunnelAddr: 10.65.255.1
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec:
  bgp: {ipv4Address: 198.18.0.3/24}
  ipv4VXLANTunnelAddr: 10.65.254.1
`)
			var mac net.HardwareAddr
			c.waitFor("vxlan.calico", func() bool {
				l, err := c.nodeH.LinkByName("vxlan.calico")
				if err == nil {
					mac = l.Attrs().HardwareAddr
				}
				return err == nil
			})
			if mac.String() != calc.VTEPMAC(nodeName, 4) {
				t.Logf("vxlan.calico MAC %s (not the name-derived one)", mac)
			}
			target := c.addPod("ns-a", "target", "10.65.0.10", map[string]string{"app": "target"}, "sa-x")
			sender := c.addPod("ns-a", "sender", "10.65.0.11", map[string]string{"app": "sender"}, "sa-x")
			sink, err := nstest.Listen(target.run, 5555)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sink.Close)
			// The external host's sinks: VXLAN a pod sends through the
			// node (forwarded), and a control port.
			extSink, err := nstest.Listen(c.extRun, 4789)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(extSink.Close)
			extControl, err := nstest.Listen(c.extRun, 4790)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(extControl.Close)

			remotePod := netip.MustParseAddr("10.65.254.5")
			// A source sends one datagram carrying a payload; sink is
			// where it arrives when it gets through.
			type source struct {
				name string
				sink *nstest.Sink
				send func(payload string) error
			}
			// fromExt is VXLAN from the external namespace at addr to the
			// node, carrying a packet for the target pod.
			fromExt := func(addr string) source {
				return source{"host " + addr, sink, func(p string) error {
					return nstest.SendUDPFrom(c.extRun, netip.MustParseAddr(addr), nodeAddr, 4789, vxlanFrame(mac, remotePod, target.ip, 5555, p))
				}}
			}
			fromPod := source{"pod to the node", sink, func(p string) error {
				return nstest.SendUDPFrom(sender.run, sender.ip, nodeAddr, 4789, vxlanFrame(mac, remotePod, target.ip, 5555, p))
			}}
			// podToExt is UDP from the pod through the node to the
			// external host (the payload as it is: that sink sees it).
			podToExt := func(port int, s *nstest.Sink) source {
				return source{fmt.Sprintf("pod to the external host's port %d", port), s, func(p string) error {
					return nstest.SendUDPFrom(sender.run, sender.ip, extAddr, port, p)
				}}
			}
			seq := 0
			// expect waits until every source gets through or not as
			// wanted (felix programs asynchronously); a packet that gets
			// through when it must not fails at once.
			expect := func(what string, want map[bool][]source) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					var bad []string
					for allowed, srcs := range want {
						for _, s := range srcs {
							seq++
							p := fmt.Sprintf("%s-%d", strings.ReplaceAll(s.name, " ", "-"), seq)
							if err := s.send(p); err != nil {
								t.Fatal(err)
							}
							got := false
							for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && !got; time.Sleep(10 * time.Millisecond) {
								_, got = s.sink.From(p)
							}
							if got != allowed {
								bad = append(bad, fmt.Sprintf("%s: got through %v, want %v", s.name, got, allowed))
							}
						}
					}
					if len(bad) == 0 {
						return
					}
					if time.Now().After(deadline) {
						out, _ := c.node.Run(c.save, "-c")
						t.Fatalf("%s:\n  %s\n%s", what, strings.Join(bad, "\n  "), out)
					}
				}
			}
			expect("default", map[bool][]source{
				true:  {fromExt("198.18.0.3"), podToExt(4790, extControl)},
				false: {fromExt("198.18.0.2"), fromPod, podToExt(4789, extSink)},
			})
			config("  externalNodesList: [198.18.0.2/32]\n")
			expect("externalNodesList", map[bool][]source{
				true:  {fromExt("198.18.0.3"), fromExt("198.18.0.2")},
				false: {fromPod, podToExt(4789, extSink)},
			})
			// Allowed from workloads, a pod's VXLAN leaves the node; to the
			// node itself it is still not from a node (Calico's cali-INPUT
			// checks the source before the workload rules).
			config("  allowVXLANPacketsFromWorkloads: true\n")
			expect("allowVXLANPacketsFromWorkloads", map[bool][]source{
				true:  {fromExt("198.18.0.3"), podToExt(4789, extSink)},
				false: {fromExt("198.18.0.2"), fromPod},
			})
		})
	}
}
