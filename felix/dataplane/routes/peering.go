package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetPeering wants the local BGP peering addresses (BGPConfiguration
// localWorkloadPeeringIPV4/IPV6, as /32 and /128) on the host side of a
// workload interface whose workload a BGPPeer's localWorkloadSelector
// makes a peer of the node, as Calico's felix puts them there: the
// workload's BGP speaker connects to them. Nil wants none.
func (m *Manager) SetPeering(iface string, addrs []netip.Prefix) {
	if iface == "" || slices.Equal(m.peering[iface], addrs) {
		return
	}
	if len(addrs) == 0 {
		delete(m.peering, iface)
	} else {
		m.peering[iface] = slices.Clone(addrs)
	}
	m.peeringDirty[iface] = struct{}{}
}

// applyPeering writes the addresses of the interfaces that changed: the
// wanted ones added, any other global address of the interface removed
// (a workload interface holds none but these). An interface that is not
// there yet stays pending.
func (m *Manager) applyPeering() error {
	var errs []error
	for iface := range m.peeringDirty {
		link, err := m.h.LinkByName(iface)
		if err != nil {
			var notFound netlink.LinkNotFoundError
			if errors.As(err, &notFound) {
				if len(m.peering[iface]) == 0 {
					delete(m.peeringDirty, iface) // gone, and nothing wanted
				}
				continue
			}
			errs = append(errs, fmt.Errorf("peering addresses of %s: %w", iface, err))
			continue
		}
		if err := m.syncAddrs(link, m.peering[iface]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(m.peeringDirty, iface)
	}
	return errors.Join(errs...)
}

// syncAddrs makes the global addresses of link exactly want.
func (m *Manager) syncAddrs(link netlink.Link, want []netip.Prefix) error {
	name := link.Attrs().Name
	have, err := m.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	present := map[netip.Prefix]bool{}
	for _, a := range have {
		p, ok := globalPrefix(a)
		if !ok {
			continue
		}
		if slices.Contains(want, p) {
			present[p] = true
			continue
		}
		aa := a
		if err := m.h.AddrDel(link, &aa); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("removing %s from %s: %w", p, name, err)
		}
		m.log.WithFields(log.Fields{"iface": name, "addr": p}).Info("Removed a local BGP peering address")
	}
	for _, p := range want {
		if present[p] {
			continue
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := m.h.AddrAdd(link, a); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("adding %s to %s: %w", p, name, err)
		}
		m.log.WithFields(log.Fields{"iface": name, "addr": p}).Info("Added a local BGP peering address")
	}
	return nil
}

// globalPrefix is an address of an interface as a prefix, false for the
// IPv6 link-local ones the kernel gives every interface.
func globalPrefix(a netlink.Addr) (netip.Prefix, bool) {
	if a.IPNet == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok || ip.Unmap().IsLinkLocalUnicast() && ip.Is6() {
		return netip.Prefix{}, false
	}
	ones, _ := a.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// readBackPeering marks for writing every workload interface whose global
// addresses are not the wanted peering addresses.
func (m *Manager) readBackPeering(links []netlink.Link) error {
	for _, l := range links {
		name := l.Attrs().Name
		if !m.ours(name) {
			continue
		}
		have, err := m.h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("listing the addresses of %s: %w", name, err)
		}
		var got []netip.Prefix
		for _, a := range have {
			if p, ok := globalPrefix(a); ok {
				got = append(got, p)
			}
		}
		want := m.peering[name]
		if len(got) != len(want) || !containsAll(got, want) {
			m.peeringDirty[name] = struct{}{}
		}
	}
	return nil
}

func containsAll(have, want []netip.Prefix) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
