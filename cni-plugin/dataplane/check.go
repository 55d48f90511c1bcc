package dataplane

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Check verifies that the kernel still holds what Setup made for v: the
// host veth with Calico's MAC, its sysctls and a route to each address,
// and inside the workload the interface with its addresses and default
// route(s). It reports the first difference.
func Check(v Veth) error {
	host, err := netlink.LinkByName(v.HostName)
	if err != nil {
		return fmt.Errorf("host interface %s: %w", v.HostName, err)
	}
	if host.Type() != "veth" {
		return fmt.Errorf("host interface %s is a %s link, not a veth", v.HostName, host.Type())
	}
	if !bytes.Equal(host.Attrs().HardwareAddr, HostMAC) {
		return fmt.Errorf("host interface %s has MAC %s, want %s", v.HostName, host.Attrs().HardwareAddr, HostMAC)
	}
	v4, v6 := v.families()
	for _, kv := range hostSysctls(v.HostName, v4, v6) {
		got, err := readSysctl(kv[0])
		if err != nil {
			return err
		}
		if got != kv[1] {
			return fmt.Errorf("sysctl %s is %s, want %s", kv[0], got, kv[1])
		}
	}
	for _, a := range v.Addrs {
		if err := hasRoute(host, hostPrefix(a), nil); err != nil {
			return err
		}
	}

	netns, err := ns.GetNS(v.NetNS)
	if err != nil {
		return fmt.Errorf("opening workload netns %s: %w", v.NetNS, err)
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(v.ContainerName)
		if err != nil {
			return fmt.Errorf("workload interface %s: %w", v.ContainerName, err)
		}
		if link.Attrs().MTU != v.MTU {
			return fmt.Errorf("workload interface %s has mtu %d, want %d", v.ContainerName, link.Attrs().MTU, v.MTU)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("listing addresses of %s: %w", v.ContainerName, err)
		}
		for _, a := range v.Addrs {
			if !hasAddr(addrs, hostPrefix(a)) {
				return fmt.Errorf("workload interface %s lacks address %s", v.ContainerName, hostPrefix(a))
			}
		}
		if v4 {
			if err := hasRoute(link, defaultDst(4), GatewayIPv4); err != nil {
				return err
			}
		}
		if v6 {
			if err := hasRoute(link, defaultDst(6), GatewayIPv6); err != nil {
				return err
			}
		}
		return nil
	})
}

func hasAddr(addrs []netlink.Addr, want *net.IPNet) bool {
	for _, a := range addrs {
		if a.IPNet != nil && a.IPNet.String() == want.String() {
			return true
		}
	}
	return false
}

// hasRoute looks for a route to dst through link (via gw when set).
func hasRoute(link netlink.Link, dst *net.IPNet, gw net.IP) error {
	family := netlink.FAMILY_V4
	if dst.IP.To4() == nil {
		family = netlink.FAMILY_V6
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return fmt.Errorf("listing routes of %s: %w", link.Attrs().Name, err)
	}
	for _, r := range routes {
		d := "default"
		if r.Dst != nil && !isDefault(r.Dst) {
			d = r.Dst.String()
		}
		want := dst.String()
		if isDefault(dst) {
			want = "default"
		}
		if d == want && (gw == nil || r.Gw.Equal(gw)) {
			return nil
		}
	}
	if gw != nil {
		return fmt.Errorf("no route %s via %s dev %s", dst, gw, link.Attrs().Name)
	}
	return fmt.Errorf("no route %s dev %s", dst, link.Attrs().Name)
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// Addrs turns the addresses of a CNI result into plain addresses.
func Addrs(ipnets []net.IPNet) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(ipnets))
	for _, n := range ipnets {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			return nil, fmt.Errorf("bad address %v", n.IP)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}
