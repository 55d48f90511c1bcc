package calc

import (
	"crypto/sha1"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// KindIPAMBlock is the kind of the IPAM blocks the syncer passes along
// (as Updates whose Value is a *Block, Key.Name the block's CIDR). Blocks
// are not v3 resources; felix reads them as Calico's felix does, to route
// to other nodes' pods.
const KindIPAMBlock = "IPAMBlock"

// Block is what the route resolver needs of an IPAM block.
type Block struct {
	v3.TypeMeta
	v3.ObjectMeta
	CIDR netip.Prefix
	// Host is the node the block is affine to ("" for none).
	Host string
	// Borrowed are the block's addresses handed out for another node than
	// Host (by their node attribute), and that node.
	Borrowed map[netip.Addr]string
}

// BlockFromIPAM keeps what the resolver needs of an IPAM block.
func BlockFromIPAM(b ipam.Block) *Block {
	out := &Block{TypeMeta: v3.TypeMeta{Kind: KindIPAMBlock}, ObjectMeta: v3.ObjectMeta{Name: b.CIDR.String()}, CIDR: b.CIDR, Host: b.Host}
	for _, a := range b.Allocations {
		if n := a.Attrs[ipam.AttrNode]; n != "" && n != b.Host {
			if out.Borrowed == nil {
				out.Borrowed = map[netip.Addr]string{}
			}
			out.Borrowed[a.IP] = n
		}
	}
	return out
}

// VTEP is one node's VXLAN tunnel endpoint of one IP family.
type VTEP struct {
	Node string
	// TunnelAddr is the address of the node's VXLAN device.
	TunnelAddr netip.Addr
	// MAC is the device's MAC: the Node's vxlanTunnelMACAddr(V6), else
	// derived from the node name as Calico does.
	MAC string
	// ParentAddr is the node's own address of that family: where VXLAN
	// packets for it go.
	ParentAddr netip.Addr
}

// OverlayRoute is a route to another node's pods that felix programs
// itself (a block of a VXLAN pool, or an address borrowed from one).
type OverlayRoute struct {
	Dst  netip.Prefix
	Node string
	// Encap: through the VXLAN device to the node's VTEP (Gateway is its
	// tunnel address); otherwise straight to the node over the
	// underlay (Gateway is the node's address): a CrossSubnet pool's
	// block on a node in this node's subnet.
	Encap   bool
	Gateway netip.Addr
}

// Overlay is the whole overlay state felix wants on this node.
type Overlay struct {
	// Local4 and Local6 are this node's VTEPs (nil while it has no tunnel
	// address of that family): the VXLAN devices to keep.
	Local4, Local6 *VTEP
	// VTEPs are the other nodes' VTEPs, by node then family: each one a
	// static neighbour and FDB entry on the device of its family.
	VTEPs []VTEP
	// Routes are sorted by destination.
	Routes []OverlayRoute
	// LocalBlocks are this node's blocks of VXLAN pools, sorted: where
	// BGP does not blackhole them, the dataplane does, so traffic to
	// their unused addresses ends here.
	LocalBlocks []netip.Prefix
	// VXLAN4 and VXLAN6 say whether an enabled VXLAN pool of the family
	// exists (the pod MTU then leaves room for the VXLAN header).
	VXLAN4, VXLAN6 bool
	// IPIPPools names the pools asking for IP-in-IP (ipipMode Always or
	// CrossSubnet), which Palisade does not build.
	IPIPPools []string
}

// OverlayDataplane is implemented by a dataplane that programs the
// overlay; Graph.Flush passes it the whole state whenever it changes.
type OverlayDataplane interface {
	OnOverlayUpdate(o *Overlay)
}

// overlayNode is what the resolver keeps of a Node.
type overlayNode struct {
	addr4, addr6     netip.Prefix // the node's own addresses with their subnets
	tunnel4, tunnel6 netip.Addr
	mac4, mac6       string
}

type overlayPool struct {
	cidr     netip.Prefix
	vxlan    v3.EncapMode
	ipip     v3.EncapMode
	disabled bool
}

// routeResolver is the calculation stage that turns Nodes, IP pools and
// IPAM blocks into the overlay's routes, neighbours and FDB entries (the
// job of Calico's route resolver). It is pure: Overlay depends only on
// the current inputs, whatever order they came in.
type routeResolver struct {
	hostname string
	nodes    map[string]overlayNode
	pools    map[string]overlayPool
	blocks   map[netip.Prefix]*Block
	// workloadIPs is FelixConfiguration routeSource WorkloadIPs: routes
	// come from the workloads' addresses (workloads, by endpoint key),
	// not from IPAM blocks, as Calico's route resolver.
	workloadIPs bool
	workloads   map[string]overlayWorkload
	dirty       bool
	sent        *Overlay
}

// overlayWorkload is what the resolver keeps of a WorkloadEndpoint.
type overlayWorkload struct {
	node string
	nets []netip.Prefix
}

func newRouteResolver(hostname string) *routeResolver {
	return &routeResolver{
		hostname: hostname, nodes: map[string]overlayNode{}, pools: map[string]overlayPool{},
		blocks: map[netip.Prefix]*Block{}, workloads: map[string]overlayWorkload{}, dirty: true,
	}
}

func (r *routeResolver) onNode(name string, n *v3.Node) {
	old, had := r.nodes[name]
	if n == nil {
		if had {
			delete(r.nodes, name)
			r.dirty = true
		}
		return
	}
	var on overlayNode
	on.read(n)
	if !had || old != on {
		r.nodes[name] = on
		r.dirty = true
	}
}

// read takes the node's own addresses (spec.bgp, else its CalicoNodeIP
// addresses), VXLAN tunnel addresses and MACs.
func (o *overlayNode) read(n *v3.Node) {
	if b := n.Spec.BGP; b != nil {
		o.addr4, _ = netip.ParsePrefix(b.IPv4Address)
		o.addr6, _ = netip.ParsePrefix(b.IPv6Address)
	}
	for _, a := range n.Spec.Addresses {
		if a.Type != v3.NodeAddressCalicoNodeIP {
			continue
		}
		p, err := ParseNet(a.Address)
		if err != nil {
			continue
		}
		if pp, err := netip.ParsePrefix(a.Address); err == nil {
			p = pp
		}
		if p.Addr().Is4() && !o.addr4.IsValid() {
			o.addr4 = p
		} else if p.Addr().Is6() && !o.addr6.IsValid() {
			o.addr6 = p
		}
	}
	o.tunnel4 = parseAddr(n.Spec.IPv4VXLANTunnelAddr)
	o.tunnel6 = parseAddr(n.Spec.IPv6VXLANTunnelAddr)
	o.mac4 = normalMAC(n.Spec.VXLANTunnelMACAddr)
	o.mac6 = normalMAC(n.Spec.VXLANTunnelMACAddrV6)
}

// onWorkload records a WorkloadEndpoint's node and addresses (nil nets:
// gone); only with routeSource WorkloadIPs do they change the overlay.
func (r *routeResolver) onWorkload(key, node string, nets []netip.Prefix) {
	old, had := r.workloads[key]
	if nets == nil {
		delete(r.workloads, key)
	} else {
		r.workloads[key] = overlayWorkload{node: node, nets: nets}
	}
	if r.workloadIPs && (had || nets != nil) && (!had || old.node != node || !slices.Equal(old.nets, nets)) {
		r.dirty = true
	}
}

// setRouteSource follows FelixConfiguration routeSource.
func (r *routeResolver) setRouteSource(workloadIPs bool) {
	if workloadIPs != r.workloadIPs {
		r.workloadIPs, r.dirty = workloadIPs, true
	}
}

func (r *routeResolver) onPool(name string, p *v3.IPPool) {
	old, had := r.pools[name]
	if p == nil {
		if had {
			delete(r.pools, name)
			r.dirty = true
		}
		return
	}
	cidr, err := ParseNet(p.Spec.CIDR)
	if err != nil {
		return
	}
	op := overlayPool{cidr: cidr, vxlan: orNever(p.Spec.VXLANMode), ipip: orNever(p.Spec.IPIPMode), disabled: p.Spec.Disabled}
	if !had || old != op {
		r.pools[name] = op
		r.dirty = true
	}
}

func (r *routeResolver) onBlock(cidr netip.Prefix, b *Block) {
	old, had := r.blocks[cidr]
	if b == nil {
		if had {
			delete(r.blocks, cidr)
			r.dirty = true
		}
		return
	}
	if had && old.Host == b.Host && maps.Equal(old.Borrowed, b.Borrowed) {
		return
	}
	r.blocks[cidr] = b
	r.dirty = true
}

func orNever(m v3.EncapMode) v3.EncapMode {
	if m == "" {
		return v3.EncapNever
	}
	return m
}

func parseAddr(s string) netip.Addr {
	p, err := ParseNet(s)
	if err != nil {
		return netip.Addr{}
	}
	return p.Addr()
}

// normalMAC writes a MAC as net.HardwareAddr prints it ("" when invalid).
func normalMAC(s string) string {
	if s == "" {
		return ""
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return ""
	}
	return hw.String()
}

// VTEPMAC is the MAC of a node's VXLAN device when its Node names none:
// 0x66 ('f', locally administered, unicast) and the first five bytes of
// the SHA-1 of the node name (of "<name>-v6" for IPv6), as Calico's felix
// computes it, so mixed clusters agree.
func VTEPMAC(node string, version int) string {
	if version == 6 {
		node += "-v6"
	}
	sum := sha1.Sum([]byte(node))
	return net.HardwareAddr(append([]byte("f"), sum[:5]...)).String()
}

// vtep is node's VTEP of a family, or false when it has none (no tunnel
// address or no own address of that family).
func (r *routeResolver) vtep(name string, version int) (VTEP, bool) {
	n, ok := r.nodes[name]
	if !ok {
		return VTEP{}, false
	}
	v := VTEP{Node: name, TunnelAddr: n.tunnel4, MAC: n.mac4, ParentAddr: n.addr4.Addr()}
	if version == 6 {
		v = VTEP{Node: name, TunnelAddr: n.tunnel6, MAC: n.mac6, ParentAddr: n.addr6.Addr()}
	}
	if !v.TunnelAddr.IsValid() || !v.ParentAddr.IsValid() {
		return VTEP{}, false
	}
	if v.MAC == "" {
		v.MAC = VTEPMAC(name, version)
	}
	return v, true
}

// poolOf is the most specific pool holding p.
func (r *routeResolver) poolOf(p netip.Prefix) (string, overlayPool, bool) {
	var best string
	var bp overlayPool
	found := false
	for _, name := range slices.Sorted(maps.Keys(r.pools)) {
		op := r.pools[name]
		if op.cidr.Bits() <= p.Bits() && op.cidr.Contains(p.Addr()) && (!found || op.cidr.Bits() > bp.cidr.Bits()) {
			best, bp, found = name, op, true
		}
	}
	return best, bp, found
}

// route is the overlay route to dst on node, if felix programs one.
func (r *routeResolver) route(dst netip.Prefix, node string) (OverlayRoute, bool) {
	if node == "" || node == r.hostname {
		return OverlayRoute{}, false
	}
	_, pool, ok := r.poolOf(dst)
	if !ok || pool.vxlan == v3.EncapNever {
		return OverlayRoute{}, false
	}
	version := 4
	if dst.Addr().Is6() {
		version = 6
	}
	remote, ok := r.nodes[node]
	if !ok {
		return OverlayRoute{}, false
	}
	if pool.vxlan == v3.EncapCrossSubnet {
		local := r.nodes[r.hostname]
		la, ra := local.addr4, remote.addr4
		if version == 6 {
			la, ra = local.addr6, remote.addr6
		}
		if la.IsValid() && ra.IsValid() && la.Masked().Contains(ra.Addr()) {
			return OverlayRoute{Dst: dst, Node: node, Gateway: ra.Addr()}, true
		}
	}
	v, ok := r.vtep(node, version)
	if !ok {
		return OverlayRoute{}, false
	}
	return OverlayRoute{Dst: dst, Node: node, Encap: true, Gateway: v.TunnelAddr}, true
}

// compute works the whole overlay out from the current inputs.
func (r *routeResolver) compute() *Overlay {
	o := &Overlay{}
	for _, name := range slices.Sorted(maps.Keys(r.pools)) {
		p := r.pools[name]
		if p.ipip != v3.EncapNever && !p.disabled {
			o.IPIPPools = append(o.IPIPPools, name)
		}
		if p.vxlan != v3.EncapNever && !p.disabled {
			if p.cidr.Addr().Is6() {
				o.VXLAN6 = true
			} else {
				o.VXLAN4 = true
			}
		}
	}
	if v, ok := r.vtep(r.hostname, 4); ok {
		o.Local4 = &v
	}
	if v, ok := r.vtep(r.hostname, 6); ok {
		o.Local6 = &v
	}
	for _, name := range slices.Sorted(maps.Keys(r.nodes)) {
		if name == r.hostname {
			continue
		}
		for _, version := range []int{4, 6} {
			if v, ok := r.vtep(name, version); ok {
				o.VTEPs = append(o.VTEPs, v)
			}
		}
	}
	routes := map[netip.Prefix]OverlayRoute{}
	if r.workloadIPs {
		// routeSource WorkloadIPs: a host route per address of another
		// node's workload, blocks unused (nor blackholed here).
		for _, w := range r.workloads {
			for _, n := range w.nets {
				if !n.IsSingleIP() {
					continue
				}
				if rt, ok := r.route(n, w.node); ok {
					routes[n] = rt
				}
			}
		}
	}
	for cidr, b := range r.blocks {
		if r.workloadIPs {
			break
		}
		if b.Host == r.hostname {
			if _, pool, ok := r.poolOf(cidr); ok && pool.vxlan != v3.EncapNever {
				o.LocalBlocks = append(o.LocalBlocks, cidr)
			}
		}
		if rt, ok := r.route(cidr, b.Host); ok {
			routes[cidr] = rt
		}
		for a, node := range b.Borrowed {
			dst := netip.PrefixFrom(a, a.BitLen())
			if rt, ok := r.route(dst, node); ok {
				routes[dst] = rt
			}
		}
	}
	for _, dst := range slices.SortedFunc(maps.Keys(routes), comparePrefix) {
		o.Routes = append(o.Routes, routes[dst])
	}
	slices.SortFunc(o.LocalBlocks, comparePrefix)
	return o
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// flush passes the overlay to dp when it changed since the last flush.
func (r *routeResolver) flush(dp OverlayDataplane) {
	if !r.dirty {
		return
	}
	r.dirty = false
	o := r.compute()
	if r.sent != nil && reflect.DeepEqual(o, r.sent) {
		return
	}
	r.sent = o
	cp := *o
	cp.VTEPs, cp.Routes, cp.IPIPPools, cp.LocalBlocks = slices.Clone(o.VTEPs), slices.Clone(o.Routes), slices.Clone(o.IPIPPools), slices.Clone(o.LocalBlocks)
	dp.OnOverlayUpdate(&cp)
}

// String is a readable dump of the overlay, one line per item (for
// golden files and logs).
func (o *Overlay) String() string {
	var b strings.Builder
	local := func(fam string, v *VTEP) {
		if v == nil {
			b.WriteString("local" + fam + ": none\n")
			return
		}
		b.WriteString("local" + fam + ": " + v.TunnelAddr.String() + " mac " + v.MAC + " parent " + v.ParentAddr.String() + "\n")
	}
	local("4", o.Local4)
	local("6", o.Local6)
	b.WriteString("vxlan4: " + boolWord(o.VXLAN4) + ", vxlan6: " + boolWord(o.VXLAN6) + "\n")
	if len(o.IPIPPools) > 0 {
		b.WriteString("ipip pools: " + strings.Join(o.IPIPPools, ", ") + "\n")
	}
	for _, v := range o.VTEPs {
		b.WriteString("vtep " + v.Node + ": " + v.TunnelAddr.String() + " mac " + v.MAC + " parent " + v.ParentAddr.String() + "\n")
	}
	for _, p := range o.LocalBlocks {
		b.WriteString("local block " + p.String() + "\n")
	}
	for _, rt := range o.Routes {
		how := "direct via " + rt.Gateway.String()
		if rt.Encap {
			how = "vxlan via " + rt.Gateway.String()
		}
		b.WriteString("route " + rt.Dst.String() + " " + how + " (" + rt.Node + ")\n")
	}
	return b.String()
}

func boolWord(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
