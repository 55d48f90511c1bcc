package bgp

import (
	"fmt"
	"net/netip"
	"path"

	"github.com/vishvananda/netlink"
)

// nodeInterfaces reads the subnets of this node's interfaces (in the
// calling thread's network namespace) by interface name, leaving out
// those that match a BGPConfiguration ignoredInterfaces pattern; their
// subnets are returned apart. Link-local subnets are left out of both
// (every interface has the same one).
func nodeInterfaces(ignored []string) (map[string][]netip.Prefix, []netip.Prefix, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("listing interfaces: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("listing addresses: %w", err)
	}
	keep := map[string][]netip.Prefix{}
	var dropped []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		pfx := netip.PrefixFrom(ip.Unmap(), bits).Masked()
		name := names[a.LinkIndex]
		if ignoredInterface(ignored, name) {
			dropped = append(dropped, pfx)
			continue
		}
		keep[name] = append(keep[name], pfx)
	}
	return keep, dropped, nil
}

// ignoredInterface reports whether name matches one of the patterns
// (shell globs, as BIRD reads Calico's ignoredInterfaces).
func ignoredInterface(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
