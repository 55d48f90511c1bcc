package vxlan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// Device names, as Calico's.
const (
	DeviceV4 = "vxlan.calico"
	DeviceV6 = "vxlan-v6.calico"
)

// Defaults of the FelixConfiguration fields, as Calico's.
const (
	DefaultVNI  = 4096
	DefaultPort = 4789
	// Overhead4 and Overhead6 are what VXLAN adds to a packet: outer IP,
	// UDP, VXLAN and inner Ethernet headers.
	Overhead4 = 50
	Overhead6 = 70
)

// RouteProtocol marks the routes the overlay writes (and owns): every
// route of this protocol in the main table that the overlay does not want
// is deleted.
const RouteProtocol = 80

// Device is a VXLAN device as wanted or as read back.
type Device struct {
	Name string
	VNI  int
	Port int
	// Parent is the underlay interface, Local the node's address on it
	// (the packets' source).
	Parent string
	Local  netip.Addr
	MAC    string
	MTU    int
	// Addr is the tunnel address, a /32 (/128).
	Addr netip.Addr
	// Up is the device's administrative state (wanted: up).
	Up bool
}

// Neigh is a static neighbour: a remote tunnel address and its MAC.
type Neigh struct {
	IP  netip.Addr
	MAC string
}

// FDB is a static forwarding entry: frames for MAC go to Dst over UDP.
type FDB struct {
	MAC string
	Dst netip.Addr
}

// Route is a route the overlay owns.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
	Dev string
	// OnLink: the gateway is reached on Dev whatever the addresses say
	// (a remote tunnel address).
	OnLink bool
	// Blackhole: a local block's unused addresses end here (Via and Dev
	// empty).
	Blackhole bool
}

// Family is the kernel state of one IP family.
type Family struct {
	// Device is nil when no VXLAN device of this family is wanted (or
	// none exists).
	Device *Device
	Neighs map[netip.Addr]string // tunnel address → MAC, on Device
	FDB    map[string]netip.Addr // MAC → node address, on Device
	Routes map[netip.Prefix]Route
}

func newFamily() Family {
	return Family{Neighs: map[netip.Addr]string{}, FDB: map[string]netip.Addr{}, Routes: map[netip.Prefix]Route{}}
}

// State is the overlay's kernel state, both families.
type State struct {
	V4, V6 Family
}

// Params are what the desired state depends on besides the overlay.
type Params struct {
	// Enabled is FelixConfiguration vxlanEnabled: nil is automatic (a
	// device wherever this node has a tunnel address), false is no
	// overlay at all.
	Enabled *bool
	VNI     int
	Port    int
	// MTU4 and MTU6 are the devices' MTUs (already resolved from vxlanMTU
	// or the host MTU).
	MTU4, MTU6 int
	// Parents names the interface holding each of this node's addresses.
	Parents map[netip.Addr]string
	// Blackholes: blackhole this node's blocks of VXLAN pools (when no
	// BGP speaker does).
	Blackholes bool
}

// Desired computes the kernel state the overlay wants.
func Desired(o *calc.Overlay, p Params) State {
	st := State{V4: newFamily(), V6: newFamily()}
	if o == nil || (p.Enabled != nil && !*p.Enabled) {
		return st
	}
	for _, fam := range []struct {
		f       *Family
		version int
		local   *calc.VTEP
		name    string
		mtu     int
	}{
		{&st.V4, 4, o.Local4, DeviceV4, p.MTU4},
		{&st.V6, 6, o.Local6, DeviceV6, p.MTU6},
	} {
		f := fam.f
		if fam.local != nil {
			if parent, ok := p.Parents[fam.local.ParentAddr]; ok {
				f.Device = &Device{
					Name: fam.name, VNI: p.VNI, Port: p.Port, Parent: parent, Local: fam.local.ParentAddr,
					MAC: fam.local.MAC, MTU: fam.mtu, Addr: fam.local.TunnelAddr, Up: true,
				}
			}
		}
		if f.Device != nil {
			for _, v := range o.VTEPs {
				if v.TunnelAddr.Is4() != (fam.version == 4) {
					continue
				}
				f.Neighs[v.TunnelAddr] = v.MAC
				f.FDB[v.MAC] = v.ParentAddr
			}
		}
		if p.Blackholes {
			for _, b := range o.LocalBlocks {
				if b.Addr().Is4() == (fam.version == 4) {
					f.Routes[b] = Route{Dst: b, Blackhole: true}
				}
			}
		}
		var parent string
		if fam.local != nil {
			parent = p.Parents[fam.local.ParentAddr]
		}
		for _, r := range o.Routes {
			if r.Dst.Addr().Is4() != (fam.version == 4) {
				continue
			}
			switch {
			case r.Encap && f.Device != nil:
				if _, ok := f.Neighs[r.Gateway]; ok {
					f.Routes[r.Dst] = Route{Dst: r.Dst, Via: r.Gateway, Dev: f.Device.Name, OnLink: true}
				}
			case !r.Encap:
				dev := parent
				if dev == "" {
					dev = parentFor(p.Parents, r.Gateway)
				}
				if dev != "" {
					f.Routes[r.Dst] = Route{Dst: r.Dst, Via: r.Gateway, Dev: dev}
				}
			}
		}
	}
	return st
}

// parentFor is the interface of a local address of the gateway's family
// (for a direct route when this node has no VTEP of that family).
func parentFor(parents map[netip.Addr]string, gw netip.Addr) string {
	for _, a := range slices.SortedFunc(maps.Keys(parents), netip.Addr.Compare) {
		if a.Is4() == gw.Is4() {
			return parents[a]
		}
	}
	return ""
}

// Ops are the kernel writes that turn one state into another, in the
// order they must happen.
type Ops struct {
	// DeleteDevice / CreateDevice: a device that is unwanted or cannot be
	// changed in place (VNI, port, parent, local address) goes first.
	DeleteDevice []string
	CreateDevice []Device
	// SetMTU, SetMAC, SetAddr fix a device in place.
	SetMTU             []Device
	SetMAC             []Device
	SetAddr            []Device
	SetUp              []Device
	DelNeigh, SetNeigh []NeighOp
	DelFDB, SetFDB     []FDBOp
	DelRoute, SetRoute []Route
}

// NeighOp is a neighbour write on a device.
type NeighOp struct {
	Dev string
	Neigh
}

// FDBOp is an FDB write on a device.
type FDBOp struct {
	Dev string
	FDB
}

// Empty reports whether nothing needs writing.
func (o Ops) Empty() bool {
	return len(o.DeleteDevice)+len(o.CreateDevice)+len(o.SetMTU)+len(o.SetMAC)+len(o.SetAddr)+len(o.SetUp)+
		len(o.DelNeigh)+len(o.SetNeigh)+len(o.DelFDB)+len(o.SetFDB)+len(o.DelRoute)+len(o.SetRoute) == 0
}

// Count is the number of writes.
func (o Ops) Count() int {
	return len(o.DeleteDevice) + len(o.CreateDevice) + len(o.SetMTU) + len(o.SetMAC) + len(o.SetAddr) + len(o.SetUp) +
		len(o.DelNeigh) + len(o.SetNeigh) + len(o.DelFDB) + len(o.SetFDB) + len(o.DelRoute) + len(o.SetRoute)
}

// Diff computes the writes that turn have into want.
func Diff(have, want State) Ops {
	var ops Ops
	for _, f := range []struct{ have, want Family }{{have.V4, want.V4}, {have.V6, want.V6}} {
		h, w := f.have, f.want
		recreated := false
		switch {
		case w.Device == nil && h.Device != nil:
			ops.DeleteDevice = append(ops.DeleteDevice, h.Device.Name)
			h = newFamily() // its neighbours, FDB and routes go with it
			h.Routes = withoutDev(f.have.Routes, f.have.Device.Name)
		case w.Device != nil && h.Device == nil:
			ops.CreateDevice = append(ops.CreateDevice, *w.Device)
			recreated = true
		case w.Device != nil:
			hd, wd := *h.Device, *w.Device
			if hd.VNI != wd.VNI || hd.Port != wd.Port || hd.Parent != wd.Parent || hd.Local != wd.Local {
				ops.DeleteDevice = append(ops.DeleteDevice, hd.Name)
				ops.CreateDevice = append(ops.CreateDevice, wd)
				recreated = true
			} else {
				if hd.MTU != wd.MTU {
					ops.SetMTU = append(ops.SetMTU, wd)
				}
				if hd.MAC != wd.MAC {
					ops.SetMAC = append(ops.SetMAC, wd)
				}
				if hd.Addr != wd.Addr {
					ops.SetAddr = append(ops.SetAddr, wd)
				}
				if hd.Up != wd.Up {
					ops.SetUp = append(ops.SetUp, wd)
				}
			}
		}
		if recreated {
			// A new device has no neighbours, FDB entries or routes.
			dev := w.Device.Name
			h.Neighs, h.FDB = map[netip.Addr]string{}, map[string]netip.Addr{}
			h.Routes = withoutDev(h.Routes, dev)
		}
		dev := ""
		if w.Device != nil {
			dev = w.Device.Name
		}
		for _, ip := range slices.SortedFunc(maps.Keys(h.Neighs), netip.Addr.Compare) {
			if _, ok := w.Neighs[ip]; !ok {
				ops.DelNeigh = append(ops.DelNeigh, NeighOp{dev, Neigh{ip, h.Neighs[ip]}})
			}
		}
		for _, ip := range slices.SortedFunc(maps.Keys(w.Neighs), netip.Addr.Compare) {
			if mac, ok := h.Neighs[ip]; !ok || mac != w.Neighs[ip] {
				ops.SetNeigh = append(ops.SetNeigh, NeighOp{dev, Neigh{ip, w.Neighs[ip]}})
			}
		}
		for _, mac := range slices.Sorted(maps.Keys(h.FDB)) {
			if _, ok := w.FDB[mac]; !ok {
				ops.DelFDB = append(ops.DelFDB, FDBOp{dev, FDB{mac, h.FDB[mac]}})
			}
		}
		for _, mac := range slices.Sorted(maps.Keys(w.FDB)) {
			if dst, ok := h.FDB[mac]; !ok || dst != w.FDB[mac] {
				ops.SetFDB = append(ops.SetFDB, FDBOp{dev, FDB{mac, w.FDB[mac]}})
			}
		}
		for _, dst := range slices.SortedFunc(maps.Keys(h.Routes), comparePrefix) {
			if _, ok := w.Routes[dst]; !ok {
				ops.DelRoute = append(ops.DelRoute, h.Routes[dst])
			}
		}
		for _, dst := range slices.SortedFunc(maps.Keys(w.Routes), comparePrefix) {
			if r, ok := h.Routes[dst]; !ok || r != w.Routes[dst] {
				ops.SetRoute = append(ops.SetRoute, w.Routes[dst])
			}
		}
	}
	return ops
}

func withoutDev(rs map[netip.Prefix]Route, dev string) map[netip.Prefix]Route {
	out := make(map[netip.Prefix]Route, len(rs))
	for k, r := range rs {
		if r.Dev != dev {
			out[k] = r
		}
	}
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// String writes the state as the iproute2 commands that would build it,
// one a line, sorted (golden files compare it).
func (s State) String() string {
	var b strings.Builder
	for _, f := range []Family{s.V4, s.V6} {
		if d := f.Device; d != nil {
			fmt.Fprintf(&b, "ip link add %s address %s mtu %d up type vxlan id %d dstport %d dev %s local %s nolearning\n",
				d.Name, d.MAC, d.MTU, d.VNI, d.Port, d.Parent, d.Local)
			fmt.Fprintf(&b, "ip addr add %s dev %s\n", netip.PrefixFrom(d.Addr, d.Addr.BitLen()), d.Name)
			for _, ip := range slices.SortedFunc(maps.Keys(f.Neighs), netip.Addr.Compare) {
				fmt.Fprintf(&b, "ip neigh replace %s lladdr %s dev %s nud permanent\n", ip, f.Neighs[ip], d.Name)
			}
			for _, mac := range slices.Sorted(maps.Keys(f.FDB)) {
				fmt.Fprintf(&b, "bridge fdb replace %s dev %s dst %s self permanent\n", mac, d.Name, f.FDB[mac])
			}
		}
		for _, dst := range slices.SortedFunc(maps.Keys(f.Routes), comparePrefix) {
			r := f.Routes[dst]
			if r.Blackhole {
				fmt.Fprintf(&b, "ip route replace blackhole %s proto %d\n", r.Dst, RouteProtocol)
				continue
			}
			onlink := ""
			if r.OnLink {
				onlink = " onlink"
			}
			fmt.Fprintf(&b, "ip route replace %s via %s dev %s%s proto %d\n", r.Dst, r.Via, r.Dev, onlink, RouteProtocol)
		}
	}
	return b.String()
}
