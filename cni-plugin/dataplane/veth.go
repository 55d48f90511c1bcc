package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Veth describes the link between the node and one workload interface.
type Veth struct {
	// HostName is the host side ("cali0123456789a").
	HostName string
	// ContainerName is the interface inside the workload (CNI_IFNAME).
	ContainerName string
	// NetNS is the workload's network namespace path (CNI_NETNS).
	NetNS string
	// MTU of both ends.
	MTU int
	// Addrs are the workload's addresses; they are configured as /32 and
	// /128 whatever prefix they carry.
	Addrs []netip.Addr
	// AllowIPForwarding lets the workload forward packets itself.
	AllowIPForwarding bool
	// ContainerMAC, when set, is the workload side's MAC; otherwise the
	// kernel picks one.
	ContainerMAC net.HardwareAddr
}

// Created is what Setup made.
type Created struct {
	// ContainerMAC is the workload side's MAC address.
	ContainerMAC net.HardwareAddr
}

func (v Veth) families() (v4, v6 bool) {
	for _, a := range v.Addrs {
		if a.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

// Setup creates the veth pair with its host side in the calling namespace
// and its workload side in v.NetNS, then configures both. A leftover veth
// with the host name (an earlier container of the same pod) is replaced; a
// link of another kind under that name is an error. On error, Setup
// removes what it created.
func Setup(v Veth) (c Created, err error) {
	netns, err := ns.GetNS(v.NetNS)
	if err != nil {
		return c, fmt.Errorf("opening workload netns %s: %w", v.NetNS, err)
	}
	defer netns.Close()

	if old, lerr := netlink.LinkByName(v.HostName); lerr == nil {
		if old.Type() != "veth" {
			return c, fmt.Errorf("host interface name %s is taken by a %s link", v.HostName, old.Type())
		}
		if derr := netlink.LinkDel(old); derr != nil {
			return c, fmt.Errorf("removing stale veth %s: %w", v.HostName, derr)
		}
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: v.HostName, MTU: v.MTU, HardwareAddr: HostMAC},
		PeerName:      v.ContainerName,
		PeerNamespace: netlink.NsFd(int(netns.Fd())),
	}
	if v.ContainerMAC != nil {
		veth.PeerHardwareAddr = v.ContainerMAC
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return c, fmt.Errorf("creating veth %s (workload side %s, mtu %d): %w", v.HostName, v.ContainerName, v.MTU, err)
	}
	defer func() {
		if err != nil {
			_ = RemoveHostVeth(v.HostName)
		}
	}()

	if err := netns.Do(func(ns.NetNS) error {
		mac, err := setupContainerSide(v)
		c.ContainerMAC = mac
		return err
	}); err != nil {
		return c, err
	}
	return c, setupHostSide(v)
}

// setupContainerSide runs inside the workload's namespace: link up, the
// addresses as host routes, and everything else via the gateway.
func setupContainerSide(v Veth) (net.HardwareAddr, error) {
	link, err := netlink.LinkByName(v.ContainerName)
	if err != nil {
		return nil, fmt.Errorf("workload interface %s: %w", v.ContainerName, err)
	}
	v4, v6 := v.families()
	if v6 {
		// A namespace may start with IPv6 off; the workload needs it.
		for _, key := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/" + v.ContainerName + "/disable_ipv6"} {
			if err := writeSysctl(key, "0"); err != nil {
				return nil, err
			}
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("setting %s up: %w", v.ContainerName, err)
	}
	idx := link.Attrs().Index
	if v4 {
		gw := &net.IPNet{IP: GatewayIPv4, Mask: net.CIDRMask(32, 32)}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: gw, Scope: netlink.SCOPE_LINK}); err != nil {
			return nil, fmt.Errorf("route to gateway %s dev %s: %w", GatewayIPv4, v.ContainerName, err)
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: GatewayIPv4, Dst: defaultDst(4)}); err != nil {
			return nil, fmt.Errorf("default route via %s dev %s: %w", GatewayIPv4, v.ContainerName, err)
		}
	}
	if v6 {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: GatewayIPv6, Dst: defaultDst(6)}); err != nil {
			return nil, fmt.Errorf("default route via %s dev %s: %w", GatewayIPv6, v.ContainerName, err)
		}
	}
	for _, a := range v.Addrs {
		addr := &netlink.Addr{IPNet: hostPrefix(a)}
		if a.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return nil, fmt.Errorf("adding %s to %s: %w", addr.IPNet, v.ContainerName, err)
		}
	}
	if v.AllowIPForwarding {
		if v4 {
			if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
				return nil, err
			}
		}
		if v6 {
			if err := writeSysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
				return nil, err
			}
		}
	}
	return link.Attrs().HardwareAddr, nil
}

// setupHostSide runs in the node's namespace: sysctls, link up, and a
// scope-link route to each workload address.
func setupHostSide(v Veth) error {
	v4, v6 := v.families()
	for _, kv := range hostSysctls(v.HostName, v4, v6) {
		if err := writeSysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	link, err := netlink.LinkByName(v.HostName)
	if err != nil {
		return fmt.Errorf("host interface %s: %w", v.HostName, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", v.HostName, err)
	}
	for _, a := range v.Addrs {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostPrefix(a), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("host route %s dev %s: %w", r.Dst, v.HostName, err)
		}
	}
	return nil
}

// RemoveHostVeth deletes the host side of a workload veth (which removes
// both ends and the host routes); a missing link is not an error.
func RemoveHostVeth(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}

// RemoveContainerSide deletes the workload's interface from inside its
// namespace, which removes the veth pair and its host routes. A namespace
// or interface that is already gone is not an error: DEL may come late or
// twice. It never touches the host name, which a newer container of the
// same pod may own.
func RemoveContainerSide(netnsPath, ifName string) error {
	if netnsPath == "" {
		return nil
	}
	netns, err := ns.GetNS(netnsPath)
	if err != nil {
		var gone ns.NSPathNotExistErr
		if errors.As(err, &gone) {
			return nil
		}
		var notNS ns.NSPathNotNSErr
		if errors.As(err, &notNS) {
			return nil
		}
		return fmt.Errorf("opening workload netns %s: %w", netnsPath, err)
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error { return RemoveHostVeth(ifName) })
}

// HostVethExists reports whether a veth with the host name exists.
func HostVethExists(name string) bool {
	link, err := netlink.LinkByName(name)
	return err == nil && link.Type() == "veth"
}

func hostPrefix(a netip.Addr) *net.IPNet {
	bits := a.BitLen()
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, bits)}
}

func defaultDst(family int) *net.IPNet {
	if family == 4 {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}
