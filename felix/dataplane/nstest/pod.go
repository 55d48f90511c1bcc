package nstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// HostMAC is the MAC of the host side of every workload veth, as Calico's.
var HostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// Gateway is the workload's next hop, answered by the host side.
var Gateway = net.IPv4(169, 254, 1, 1)

// Handle opens netlink in a namespace; it is closed when the test ends.
func Handle(t testing.TB, ns NS) (*netlink.Handle, netns.NsHandle) {
	t.Helper()
	nsh, err := netns.GetFromPath(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); nsh.Close() })
	return h, nsh
}

// Sysctl writes a sysctl (a /proc/sys path below net/) in a namespace.
func Sysctl(run *nsexec.Runner, path, value string) error {
	return run.Do(func() error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) })
}

// Workload plumbs a workload the way the CNI plugin does: a veth whose
// host side (hostIf, MAC ee:ee:ee:ee:ee:ee) stays in the node namespace and
// whose other end is eth0 in the pod namespace with addr/32 and a default
// route via 169.254.1.1 (a permanent neighbour entry to the host MAC). The
// route to addr on the host side is felix's job.
func Workload(node, pod *netlink.Handle, podNS netns.NsHandle, hostIf string, addr netip.Addr) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf, HardwareAddr: HostMAC}, PeerName: "eth0", PeerNamespace: netlink.NsFd(podNS)}
	if err := node.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", hostIf, err)
	}
	host, err := node.LinkByName(hostIf)
	if err != nil {
		return err
	}
	if err := node.LinkSetUp(host); err != nil {
		return err
	}
	eth0, err := pod.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 of %s: %w", hostIf, err)
	}
	if err := pod.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return err
	}
	if err := pod.LinkSetUp(eth0); err != nil {
		return err
	}
	if lo, err := pod.LinkByName("lo"); err == nil {
		_ = pod.LinkSetUp(lo)
	}
	if err := pod.NeighAdd(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, IP: Gateway, HardwareAddr: HostMAC, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
		return err
	}
	if err := pod.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: Gateway, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
		return err
	}
	return pod.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: Gateway})
}

// GatewayIPv6 is the workload's IPv6 next hop: the link-local address the
// host side's MAC (ee:ee:ee:ee:ee:ee) gives it, as in Calico.
var GatewayIPv6 = net.ParseIP("fe80::ecee:eeff:feee:eeee")

// WorkloadIPv6 gives a workload plumbed by Workload an IPv6 address: addr/128
// on eth0 and a default route via GatewayIPv6 (a permanent neighbour entry
// to the host MAC, so nothing waits for neighbour discovery).
func WorkloadIPv6(pod *netlink.Handle, addr netip.Addr) error {
	eth0, err := pod.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := pod.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := pod.NeighAdd(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, IP: GatewayIPv6, HardwareAddr: HostMAC, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V6}); err != nil {
		return err
	}
	return pod.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: GatewayIPv6})
}
