// Package vxlan keeps felix's VXLAN overlay in the kernel of one node: the
// vxlan.calico (and vxlan-v6.calico) device, a static neighbour and FDB
// entry for every other node's VTEP, and the routes (protocol 80) to
// other nodes' blocks of VXLAN pools — through the tunnel, or for a
// CrossSubnet pool's node in this node's subnet straight over the
// underlay. Like every felix driver it reads the kernel back, diffs it
// against what the calculation graph wants (Desired, Diff: pure) and
// writes only the difference, so restarts and tampering heal. It also
// writes the pod MTU file the CNI plugin reads.
package vxlan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// DefaultMTUIfacePattern is Calico's mtuIfacePattern default: the
// interfaces whose smallest MTU is the host MTU.
const DefaultMTUIfacePattern = `^((en|wl|ww|sl|ib)[Pcopsvx].*|(eth|wlan|wwan).*)`

// defaultHostMTU is the host MTU when no interface matches the pattern.
const defaultHostMTU = 1500

// Manager owns the overlay of one network namespace.
type Manager struct {
	h       *netlink.Handle
	log     *log.Entry
	mtuFile string

	overlay *calc.Overlay
	spec    v3.FelixConfigurationSpec
	dirty   bool
	// written is what the last successful apply left (trusted until the
	// next read-back).
	written   *State
	readAgain bool
	lastRead  time.Time
	refresh   time.Duration
	podMTU    int
	ipip      map[string]bool // pools already warned about
	ipipOK    *bool
	// LastOps counts the writes of the last Apply (for tests and
	// benchmarks).
	LastOps int
	// Blackholes: blackhole this node's blocks of VXLAN pools, for a node
	// whose BGP speaker does not (backend vxlan). Set before Apply.
	Blackholes bool
}

// New opens netlink in run's namespace. mtuFile ("" for none) receives
// the pod MTU.
func New(run *nsexec.Runner, logger *log.Entry, mtuFile string) (*Manager, error) {
	h, err := run.Netlink()
	if err != nil {
		return nil, fmt.Errorf("vxlan: opening netlink: %w", err)
	}
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	return &Manager{
		h: h, log: logger.WithField("part", "vxlan"), mtuFile: mtuFile, dirty: true, readAgain: true,
		refresh: defaultRefresh, ipip: map[string]bool{},
	}, nil
}

// Close releases the netlink handle (the kernel state stays).
func (m *Manager) Close() { m.h.Close() }

// SetOverlay takes the graph's overlay.
func (m *Manager) SetOverlay(o *calc.Overlay) { m.overlay = o; m.dirty = true }

// defaultRefresh is routeRefreshInterval's default: how often the
// kernel is read back.
const defaultRefresh = 90 * time.Second

// SetConfig takes the merged FelixConfiguration spec (the vxlan* fields,
// mtuIfacePattern, and routeRefreshInterval for the read-back).
func (m *Manager) SetConfig(spec v3.FelixConfigurationSpec) {
	m.spec = spec
	m.refresh = defaultRefresh
	if spec.RouteRefreshInterval != nil {
		m.refresh = spec.RouteRefreshInterval.Duration
	}
	m.dirty = true
}

// NextRefresh is how long until the next read-back is due (a minute when
// none is configured).
func (m *Manager) NextRefresh(now time.Time) time.Duration {
	if m.refresh <= 0 {
		return time.Minute
	}
	return max(m.lastRead.Add(m.refresh).Sub(now), 0)
}

// Resync makes the next Apply read the kernel back.
func (m *Manager) Resync() { m.readAgain = true; m.dirty = true }

// Dirty reports whether Apply has work (or a read-back) to do.
func (m *Manager) Dirty() bool { return m.dirty }

// params resolves the FelixConfiguration fields and the host's
// interfaces.
func (m *Manager) params(links []netlink.Link) (Params, int, error) {
	p := Params{Enabled: m.spec.VXLANEnabled, VNI: DefaultVNI, Port: DefaultPort, Parents: map[netip.Addr]string{}, Blackholes: m.Blackholes}
	if m.spec.VXLANVNI != nil && *m.spec.VXLANVNI > 0 {
		p.VNI = *m.spec.VXLANVNI
	}
	if m.spec.VXLANPort != nil && *m.spec.VXLANPort > 0 {
		p.Port = *m.spec.VXLANPort
	}
	pattern := DefaultMTUIfacePattern
	if m.spec.MTUIfacePattern != "" {
		pattern = m.spec.MTUIfacePattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		m.log.WithError(err).WithField("mtuIfacePattern", pattern).Warn("mtuIfacePattern does not compile; using the default")
		re = regexp.MustCompile(DefaultMTUIfacePattern)
	}
	host := math.MaxInt
	names := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		if re.MatchString(a.Name) && a.MTU > 0 && a.MTU < host {
			host = a.MTU
		}
	}
	if host == math.MaxInt {
		host = defaultHostMTU
	}
	p.MTU4, p.MTU6 = host-Overhead4, host-Overhead6
	if m.spec.VXLANMTU != nil && *m.spec.VXLANMTU > 0 {
		p.MTU4 = *m.spec.VXLANMTU
	}
	if m.spec.VXLANMTUV6 != nil && *m.spec.VXLANMTUV6 > 0 {
		p.MTU6 = *m.spec.VXLANMTUV6
	}
	addrs, err := m.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return p, host, fmt.Errorf("vxlan: listing addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if n := names[a.LinkIndex]; n != "" && n != DeviceV4 && n != DeviceV6 {
			p.Parents[ip.Unmap()] = n
		}
	}
	return p, host, nil
}

// PodMTU is the MTU pods get: the host MTU, less room for VXLAN when a
// VXLAN pool of the family is enabled (the device MTUs, from vxlanMTU or
// the host MTU).
func PodMTU(o *calc.Overlay, p Params, host int) int {
	mtu := host
	if o != nil && (p.Enabled == nil || *p.Enabled) {
		if o.VXLAN4 {
			mtu = min(mtu, p.MTU4)
		}
		if o.VXLAN6 {
			mtu = min(mtu, p.MTU6)
		}
	}
	return mtu
}

// Apply brings the kernel to the wanted overlay and writes the pod MTU
// file. It reads the kernel back first when asked (Resync), after an
// error and at the first call; otherwise it trusts what it wrote.
func (m *Manager) Apply(ctx context.Context) error {
	if m.refresh > 0 && time.Since(m.lastRead) >= m.refresh {
		m.Resync()
	}
	if !m.dirty {
		return nil
	}
	m.warnIPIP()
	links, err := m.h.LinkList()
	if err != nil {
		return fmt.Errorf("vxlan: listing links: %w", err)
	}
	p, host, err := m.params(links)
	if err != nil {
		return err
	}
	want := Desired(m.overlay, p)
	var have State
	if m.readAgain || m.written == nil {
		if have, err = m.read(links); err != nil {
			return err
		}
		m.lastRead = time.Now()
	} else {
		have = *m.written
	}
	ops := Diff(have, want)
	m.LastOps = ops.Count()
	if !ops.Empty() {
		start := time.Now()
		if err := m.write(ctx, ops); err != nil {
			m.readAgain, m.written = true, nil
			return err
		}
		m.log.WithFields(log.Fields{"writes": ops.Count(), "took": time.Since(start).Round(time.Microsecond)}).Debug("VXLAN overlay programmed")
	}
	m.written, m.readAgain = &want, false
	if mtu := PodMTU(m.overlay, p, host); mtu != m.podMTU {
		if err := writeMTUFile(m.mtuFile, mtu); err != nil {
			return err
		}
		m.log.WithFields(log.Fields{"podMTU": mtu, "hostMTU": host, "file": m.mtuFile}).Info("Pod MTU")
		m.podMTU = mtu
	}
	m.dirty = false
	return nil
}

// writeMTUFile writes the pod MTU atomically where the CNI plugin reads
// it.
func writeMTUFile(path string, mtu int) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("vxlan: writing the MTU file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(mtu)), 0o644); err != nil {
		return fmt.Errorf("vxlan: writing the MTU file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("vxlan: writing the MTU file: %w", err)
	}
	return nil
}

// warnIPIP names, once each, the pools asking for IP-in-IP: this kernel
// may have no ipip link type at all, and Palisade builds no IP-in-IP
// tunnel either way.
func (m *Manager) warnIPIP() {
	if m.overlay == nil {
		return
	}
	for _, name := range m.overlay.IPIPPools {
		if m.ipip[name] {
			continue
		}
		m.ipip[name] = true
		if !m.ipipSupported() {
			m.log.WithField("ippool", name).Warn("IPPool asks for IP-in-IP (ipipMode), which is not supported on this kernel (no ipip link type): its traffic is not encapsulated; use vxlanMode")
		} else {
			m.log.WithField("ippool", name).Warn("IPPool asks for IP-in-IP (ipipMode), which Palisade does not build: its traffic is not encapsulated; use vxlanMode")
		}
	}
}

// ipipSupported probes once whether the kernel has the ipip link type
// (tunl0 exists once the module is loaded).
func (m *Manager) ipipSupported() bool {
	if m.ipipOK != nil {
		return *m.ipipOK
	}
	ok := IPIPSupported(m.h)
	m.ipipOK = &ok
	return ok
}

// IPIPSupported reports whether the kernel behind h can make ipip links.
func IPIPSupported(h *netlink.Handle) bool {
	if _, err := h.LinkByName("tunl0"); err == nil {
		return true
	}
	probe := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "plipipprobe"}}
	if err := h.LinkAdd(probe); err != nil {
		return false
	}
	_ = h.LinkDel(probe)
	return true
}

// read reads the overlay's kernel state back.
func (m *Manager) read(links []netlink.Link) (State, error) {
	st := State{V4: newFamily(), V6: newFamily()}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	for _, fam := range []struct {
		f      *Family
		name   string
		family int
	}{{&st.V4, DeviceV4, netlink.FAMILY_V4}, {&st.V6, DeviceV6, netlink.FAMILY_V6}} {
		var link netlink.Link
		for _, l := range links {
			if l.Attrs().Name == fam.name {
				link = l
			}
		}
		if link != nil {
			a := link.Attrs()
			d := &Device{Name: fam.name, VNI: -1, MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
			if vx, ok := link.(*netlink.Vxlan); ok && !vx.Learning {
				d.VNI, d.Port, d.Parent = vx.VxlanId, vx.Port, names[vx.VtepDevIndex]
				if ip, ok := netip.AddrFromSlice(vx.SrcAddr); ok {
					d.Local = ip.Unmap()
				}
			}
			addrs, err := m.h.AddrList(link, fam.family)
			if err != nil {
				return st, fmt.Errorf("vxlan: listing addresses of %s: %w", fam.name, err)
			}
			global := 0
			for _, ad := range addrs {
				ip, ok := netip.AddrFromSlice(ad.IP)
				if !ok || ip.IsLinkLocalUnicast() {
					continue
				}
				global++
				if ones, bits := ad.Mask.Size(); ones == bits {
					d.Addr = ip.Unmap()
				}
			}
			if global != 1 {
				d.Addr = netip.Addr{} // rewritten: exactly the tunnel address
			}
			fam.f.Device = d
			neighs, err := m.h.NeighList(a.Index, fam.family)
			if err != nil {
				return st, fmt.Errorf("vxlan: listing neighbours of %s: %w", fam.name, err)
			}
			for _, n := range neighs {
				ip, ok := netip.AddrFromSlice(n.IP)
				if ok && n.State&netlink.NUD_PERMANENT != 0 && len(n.HardwareAddr) == 6 {
					fam.f.Neighs[ip.Unmap()] = n.HardwareAddr.String()
				}
			}
			fdb, err := m.h.NeighList(a.Index, unix.AF_BRIDGE)
			if err != nil {
				return st, fmt.Errorf("vxlan: listing the FDB of %s: %w", fam.name, err)
			}
			for _, n := range fdb {
				ip, ok := netip.AddrFromSlice(n.IP)
				if ok && n.State&netlink.NUD_PERMANENT != 0 && len(n.HardwareAddr) == 6 {
					fam.f.FDB[n.HardwareAddr.String()] = ip.Unmap()
				}
			}
		}
		routes, err := m.h.RouteListFiltered(fam.family, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return st, fmt.Errorf("vxlan: listing routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			dst, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			rt := Route{Dst: netip.PrefixFrom(dst.Unmap(), ones), Dev: names[r.LinkIndex], OnLink: r.Flags&unix.RTNH_F_ONLINK != 0, Blackhole: r.Type == unix.RTN_BLACKHOLE}
			if gw, ok := netip.AddrFromSlice(r.Gw); ok {
				rt.Via = gw.Unmap()
			}
			if rt.Blackhole {
				rt.Dev = "" // IPv6 blackholes sit on lo
			}
			fam.f.Routes[rt.Dst] = rt
		}
	}
	return st, nil
}

// write applies ops in order: devices, then removals (routes before the
// neighbours they use), then additions (neighbours before routes).
func (m *Manager) write(ctx context.Context, ops Ops) error {
	linkOf := func(name string) (netlink.Link, error) {
		l, err := m.h.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("vxlan: finding %s: %w", name, err)
		}
		return l, nil
	}
	for _, name := range ops.DeleteDevice {
		if l, err := m.h.LinkByName(name); err == nil {
			if err := m.h.LinkDel(l); err != nil {
				return fmt.Errorf("vxlan: deleting %s: %w", name, err)
			}
		}
		m.log.WithField("device", name).Info("VXLAN device removed")
	}
	for _, d := range ops.CreateDevice {
		if err := m.create(d); err != nil {
			return err
		}
		m.log.WithFields(log.Fields{"device": d.Name, "vni": d.VNI, "port": d.Port, "parent": d.Parent, "mtu": d.MTU, "addr": d.Addr}).Info("VXLAN device created")
	}
	for _, d := range ops.SetMTU {
		l, err := linkOf(d.Name)
		if err == nil {
			err = m.h.LinkSetMTU(l, d.MTU)
		}
		if err != nil {
			return fmt.Errorf("vxlan: setting the MTU of %s to %d: %w", d.Name, d.MTU, err)
		}
	}
	for _, d := range ops.SetMAC {
		hw, _ := net.ParseMAC(d.MAC)
		l, err := linkOf(d.Name)
		if err == nil {
			err = m.h.LinkSetHardwareAddr(l, hw)
		}
		if err != nil {
			return fmt.Errorf("vxlan: setting the MAC of %s to %s: %w", d.Name, d.MAC, err)
		}
	}
	for _, d := range ops.SetAddr {
		if err := m.setAddr(d); err != nil {
			return err
		}
	}
	for _, d := range ops.SetUp {
		l, err := linkOf(d.Name)
		if err == nil {
			err = m.h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("vxlan: setting %s up: %w", d.Name, err)
		}
	}
	var errs []error
	for _, r := range ops.DelRoute {
		if err := m.h.RouteDel(m.route(r, 0)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("vxlan: deleting route %s: %w", r.Dst, err))
		}
	}
	index := map[string]int{}
	idx := func(name string) (int, error) {
		if i, ok := index[name]; ok {
			return i, nil
		}
		l, err := linkOf(name)
		if err != nil {
			return 0, err
		}
		index[name] = l.Attrs().Index
		return index[name], nil
	}
	for _, n := range ops.DelNeigh {
		i, err := idx(n.Dev)
		if err == nil {
			err = m.h.NeighDel(&netlink.Neigh{LinkIndex: i, IP: n.IP.AsSlice()})
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("vxlan: deleting neighbour %s on %s: %w", n.IP, n.Dev, err))
		}
	}
	for _, f := range ops.DelFDB {
		hw, _ := net.ParseMAC(f.MAC)
		i, err := idx(f.Dev)
		if err == nil {
			err = m.h.NeighDel(&netlink.Neigh{LinkIndex: i, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, IP: f.Dst.AsSlice(), HardwareAddr: hw})
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("vxlan: deleting FDB entry %s on %s: %w", f.MAC, f.Dev, err))
		}
	}
	for _, n := range ops.SetNeigh {
		hw, _ := net.ParseMAC(n.MAC)
		i, err := idx(n.Dev)
		if err == nil {
			err = m.h.NeighSet(&netlink.Neigh{LinkIndex: i, State: netlink.NUD_PERMANENT, IP: n.IP.AsSlice(), HardwareAddr: hw, Family: family(n.IP)})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("vxlan: neighbour %s lladdr %s on %s: %w", n.IP, n.MAC, n.Dev, err))
		}
	}
	for _, f := range ops.SetFDB {
		hw, _ := net.ParseMAC(f.MAC)
		i, err := idx(f.Dev)
		if err == nil {
			err = m.h.NeighSet(&netlink.Neigh{LinkIndex: i, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, State: netlink.NUD_PERMANENT, IP: f.Dst.AsSlice(), HardwareAddr: hw})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("vxlan: FDB entry %s dst %s on %s: %w", f.MAC, f.Dst, f.Dev, err))
		}
	}
	for _, r := range ops.SetRoute {
		var err error
		if r.Blackhole {
			nr := m.route(r, 0)
			nr.Type, nr.Scope = unix.RTN_BLACKHOLE, netlink.SCOPE_UNIVERSE
			err = m.h.RouteReplace(nr)
		} else {
			var i int
			if i, err = idx(r.Dev); err == nil {
				err = m.h.RouteReplace(m.route(r, i))
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("vxlan: route %s via %s dev %s: %w", r.Dst, r.Via, r.Dev, err))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// route is the netlink form of r (link index 0 for a deletion by
// destination and protocol).
func (m *Manager) route(r Route, index int) *netlink.Route {
	nr := &netlink.Route{
		Dst:   &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol, Family: family(r.Dst.Addr()),
		Scope: netlink.SCOPE_NOWHERE, // a deletion matches any scope
	}
	if index > 0 {
		nr.Scope = netlink.SCOPE_UNIVERSE
		nr.LinkIndex = index
		nr.Gw = r.Via.AsSlice()
		if r.OnLink {
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	}
	return nr
}

// create makes a VXLAN device with its address, up.
func (m *Manager) create(d Device) error {
	parent, err := m.h.LinkByName(d.Parent)
	if err != nil {
		return fmt.Errorf("vxlan: parent %s of %s: %w", d.Parent, d.Name, err)
	}
	hw, err := net.ParseMAC(d.MAC)
	if err != nil {
		return fmt.Errorf("vxlan: MAC %q of %s: %w", d.MAC, d.Name, err)
	}
	// Anything of that name that is not ours as wanted goes first.
	if old, err := m.h.LinkByName(d.Name); err == nil {
		if err := m.h.LinkDel(old); err != nil {
			return fmt.Errorf("vxlan: deleting the old %s: %w", d.Name, err)
		}
	}
	link := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: d.Name, MTU: d.MTU, HardwareAddr: hw},
		VxlanId:   d.VNI, VtepDevIndex: parent.Attrs().Index, SrcAddr: d.Local.AsSlice(), Port: d.Port, Learning: false,
	}
	if err := m.h.LinkAdd(link); err != nil {
		return fmt.Errorf("vxlan: creating %s (vni %d, port %d, parent %s): %w", d.Name, d.VNI, d.Port, d.Parent, err)
	}
	if err := m.setAddr(d); err != nil {
		return err
	}
	if err := m.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("vxlan: setting %s up: %w", d.Name, err)
	}
	return nil
}

// setAddr leaves exactly the tunnel address on the device (IPv6
// link-local addresses aside).
func (m *Manager) setAddr(d Device) error {
	l, err := m.h.LinkByName(d.Name)
	if err != nil {
		return fmt.Errorf("vxlan: finding %s: %w", d.Name, err)
	}
	fam := family(d.Addr)
	addrs, err := m.h.AddrList(l, fam)
	if err != nil {
		return fmt.Errorf("vxlan: listing addresses of %s: %w", d.Name, err)
	}
	want := &netlink.Addr{IPNet: &net.IPNet{IP: d.Addr.AsSlice(), Mask: net.CIDRMask(d.Addr.BitLen(), d.Addr.BitLen())}}
	if fam == netlink.FAMILY_V6 {
		want.Flags = unix.IFA_F_NODAD
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.IsLinkLocalUnicast() || a.IPNet.String() == want.IPNet.String() {
			continue
		}
		if err := m.h.AddrDel(l, &a); err != nil {
			return fmt.Errorf("vxlan: removing %s from %s: %w", a.IPNet, d.Name, err)
		}
	}
	if err := m.h.AddrReplace(l, want); err != nil {
		return fmt.Errorf("vxlan: adding %s to %s: %w", want.IPNet, d.Name, err)
	}
	return nil
}
