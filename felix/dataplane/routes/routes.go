// Package routes keeps the routes to local workloads — a /32 (or /128),
// scope link, through each workload's cali interface — equal to the
// endpoints felix knows: it adds the missing ones and removes scope-link
// routes on workload interfaces that no endpoint wants. As Calico's
// felix, it writes them with deviceRouteProtocol (RTPROT_BOOT) and the
// source hint deviceRouteSourceAddress(IPv6) when set; with
// removeExternalRoutes (the default) every other scope-link route on a
// workload interface goes, without it only those of its own protocol.
// It never touches BGP's routes (protocol 201) nor any route on other
// interfaces of the main table. Outside the main table it only keeps the
// two tables routeTableRanges gives WireGuard empty (tables.go).
package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// Protocol is the route protocol felix writes by default (RTPROT_BOOT,
// as Calico's deviceRouteProtocol).
const Protocol = unix.RTPROT_BOOT

// Options are the FelixConfiguration fields of workload routes.
type Options struct {
	// Protocol is deviceRouteProtocol (Protocol when 0).
	Protocol int
	// KeepExternal is removeExternalRoutes false: scope-link routes of
	// another protocol on workload interfaces are left alone.
	KeepExternal bool
	// Src4 and Src6 are deviceRouteSourceAddress and
	// deviceRouteSourceAddressIPv6 (invalid: none), the source the host
	// uses to reach its workloads.
	Src4, Src6 netip.Addr
	// WireguardTable4 and WireguardTable6 are the route tables Calico's
	// felix takes for WireGuard from routeTableRanges (0: none), and
	// WireguardRulePriority the priority of its routing rules: kept
	// empty and without such rules (see tables.go).
	WireguardTable4, WireguardTable6, WireguardRulePriority int
}

// bgpProtocol is the protocol of routes programmed by the BGP part
// (node/bgp/kernel.DefaultProtocol).
const bgpProtocol = 201

// Manager owns the workload routes of one namespace.
type Manager struct {
	h        *netlink.Handle
	prefixes []string
	log      *log.Entry

	opts Options

	desired map[netip.Prefix]string // dst → interface
	dirty   map[netip.Prefix]struct{}
	// peering are the local BGP peering addresses wanted on workload
	// interfaces (peering.go); peeringDirty the interfaces to write.
	peering      map[string][]netip.Prefix
	peeringDirty map[string]struct{}
	resync       bool
	// oldProtocol is the protocol routes were written with before the
	// last change of Options.Protocol (0: none).
	oldProtocol int
}

// New opens netlink in run's namespace.
func New(run *nsexec.Runner, logger *log.Entry) (*Manager, error) {
	h, err := run.Netlink()
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	return &Manager{
		h: h, prefixes: []string{"cali"}, log: logger.WithField("part", "routes"), opts: Options{Protocol: Protocol},
		desired: map[netip.Prefix]string{}, dirty: map[netip.Prefix]struct{}{}, resync: true,
		peering: map[string][]netip.Prefix{}, peeringDirty: map[string]struct{}{},
	}, nil
}

// Close releases the netlink handle.
func (m *Manager) Close() { m.h.Close() }

// SetInterfacePrefixes sets the workload interface prefixes whose routes
// the manager owns.
func (m *Manager) SetInterfacePrefixes(p []string) {
	if len(p) > 0 && strings.Join(p, ",") != strings.Join(m.prefixes, ",") {
		m.prefixes = p
		m.resync = true
	}
}

// SetOptions sets how routes are written; a change rewrites them all.
func (m *Manager) SetOptions(o Options) {
	if o.Protocol == 0 {
		o.Protocol = Protocol
	}
	if o != m.opts {
		old := m.opts.Protocol
		m.opts = o
		m.resync = true
		if old != o.Protocol {
			// Routes of the old protocol are ours to take over even
			// when external ones are kept.
			m.oldProtocol = old
		}
	}
}

// OptionsOf is the route options of a configuration.
func OptionsOf(cfg *calc.Config) Options {
	return Options{Protocol: cfg.DeviceRouteProtocol, KeepExternal: !cfg.RemoveExternalRoutes, Src4: cfg.DeviceRouteSource4, Src6: cfg.DeviceRouteSource6,
		WireguardTable4: cfg.WireguardTables[0], WireguardTable6: cfg.WireguardTables[1], WireguardRulePriority: cfg.WireguardRulePriority}
}

// route is the route felix wants to dst through the interface index.
func (m *Manager) route(dst netip.Prefix, index int) *netlink.Route {
	r := &netlink.Route{Dst: toIPNet(dst), LinkIndex: index, Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(m.opts.Protocol)}
	if src := m.opts.Src4; dst.Addr().Is6() {
		src = m.opts.Src6
		if src.IsValid() {
			r.Src = src.AsSlice()
		}
	} else if src.IsValid() {
		r.Src = src.AsSlice()
	}
	return r
}

// Set wants a route to dst through iface.
func (m *Manager) Set(dst netip.Prefix, iface string) {
	m.desired[dst] = iface
	m.dirty[dst] = struct{}{}
}

// Remove no longer wants a route to dst.
func (m *Manager) Remove(dst netip.Prefix) {
	delete(m.desired, dst)
	m.dirty[dst] = struct{}{}
}

// Resync makes the next Apply compare every route with the kernel.
func (m *Manager) Resync() { m.resync = true }

func (m *Manager) ours(name string) bool {
	for _, p := range m.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Pending is the number of wanted routes (and peering addresses) whose
// interface is missing or down; Apply should be retried while it is not
// zero.
func (m *Manager) Pending() int { return len(m.dirty) + len(m.peeringDirty) }

// Apply writes the routes that changed (all of them after a resync). A
// route whose interface is missing or down stays pending (see Pending).
func (m *Manager) Apply() error {
	if m.resync {
		if err := m.readBack(); err != nil {
			return err
		}
		m.resync = false
	}
	var firstErr error
	links := map[string]netlink.Link{}
	for dst := range m.dirty {
		iface, want := m.desired[dst]
		if !want {
			r := &netlink.Route{Dst: toIPNet(dst), Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(m.opts.Protocol)}
			if err := m.h.RouteDel(r); err != nil && !errors.Is(err, syscall.ESRCH) {
				m.log.WithError(err).WithField("dst", dst).Debug("Removing a workload route")
			}
			delete(m.dirty, dst)
			continue
		}
		link := links[iface]
		if link == nil {
			l, err := m.h.LinkByName(iface)
			if err != nil {
				m.log.WithFields(log.Fields{"dst": dst, "iface": iface}).Debug("Interface not there yet; route pending")
				continue
			}
			link, links[iface] = l, l
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			continue
		}
		r := m.route(dst, link.Attrs().Index)
		if err := m.h.RouteReplace(r); err != nil {
			if errors.Is(err, syscall.ENETDOWN) || errors.Is(err, syscall.ENODEV) {
				continue
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("route %s dev %s: %w", dst, iface, err)
			}
			continue
		}
		delete(m.dirty, dst)
	}
	if err := m.applyPeering(); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// readBack compares the kernel's scope-link routes on workload interfaces
// with the wanted ones: wrong or unwanted ones are deleted, and every
// wanted route is marked to be written.
func (m *Manager) readBack() error {
	links, err := m.h.LinkList()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		if m.ours(l.Attrs().Name) {
			names[l.Attrs().Index] = l.Attrs().Name
		}
	}
	have := map[netip.Prefix]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := m.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}
		for _, r := range routes {
			name, ok := names[r.LinkIndex]
			if !ok || r.Dst == nil || r.Scope != netlink.SCOPE_LINK || r.Protocol == bgpProtocol {
				continue
			}
			if r.Protocol == unix.RTPROT_KERNEL && fam == netlink.FAMILY_V6 {
				continue // the interface's own link-local routes
			}
			proto := int(r.Protocol)
			mine := proto == m.opts.Protocol || proto == m.oldProtocol
			if m.opts.KeepExternal && !mine {
				continue // removeExternalRoutes false: another program's
			}
			ip, _ := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			dst := netip.PrefixFrom(ip.Unmap(), ones)
			if m.desired[dst] == name {
				// Right, or rewritten in place (RouteReplace: the
				// protocol and source are not part of a route's key).
				want := m.route(dst, r.LinkIndex)
				have[dst] = proto == m.opts.Protocol && net.IP(want.Src).Equal(r.Src)
				continue
			}
			m.log.WithFields(log.Fields{"dst": dst, "iface": name}).Info("Removing a workload route no endpoint wants")
			rr := r
			if err := m.h.RouteDel(&rr); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("removing route %s dev %s: %w", dst, name, err)
			}
		}
	}
	for dst := range m.desired {
		if !have[dst] {
			m.dirty[dst] = struct{}{}
		}
	}
	m.oldProtocol = 0
	if err := m.readBackPeering(links); err != nil {
		return err
	}
	if err := m.emptyWireguardTables(); err != nil {
		// Never in the way of the workload routes: tried again at the
		// next resync.
		m.log.WithError(err).Warn("Keeping WireGuard's route tables empty")
	}
	return nil
}
