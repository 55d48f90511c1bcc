package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Networking backends (Options.Backend), as CALICO_NETWORKING_BACKEND.
const (
	// BackendBird is BGP (Palisade's embedded GoBGP), Calico's default.
	BackendBird = "bird"
	// BackendVXLAN runs no BGP at all: the VXLAN overlay carries pod
	// traffic between nodes.
	BackendVXLAN = "vxlan"
)

// VXLAN modes of the lab's pools (Options.VXLAN), as an IPPool's
// vxlanMode.
const (
	VXLANNever       = "Never"
	VXLANAlways      = "Always"
	VXLANCrossSubnet = "CrossSubnet"
)

// The second subnet and the router joining it to the first. With
// Options.Subnets 2, odd nodes are in 198.18.0.0/24 and even ones in
// 198.18.1.0/24 (bridge br1), behind the router namespace.
var (
	routerAddrs = [2]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1")}
	routerAddr6 = [2]netip.Addr{netip.MustParseAddr("fd00:198:18::1"), netip.MustParseAddr("fd00:198:18:1::1")}
	// PoolCIDR6 is the lab's IPv6 pool with Options.IPv6.
	PoolCIDR6 = "fd00:10:244::/48"
)

// overlayDefaults fills in and checks the overlay options.
func (o *Options) overlayDefaults() error {
	switch o.Subnets {
	case 0:
		o.Subnets = 1
	case 1, 2:
	default:
		return fmt.Errorf("lab %q: %d subnets: want 1 or 2", o.Name, o.Subnets)
	}
	switch o.Backend {
	case "":
		o.Backend = BackendBird
	case BackendBird, BackendVXLAN:
	default:
		return fmt.Errorf("lab %q: backend %q: want bird or vxlan", o.Name, o.Backend)
	}
	switch o.VXLAN {
	case "":
		o.VXLAN = VXLANNever
		if o.Backend == BackendVXLAN {
			o.VXLAN = VXLANAlways
		}
	case VXLANNever, VXLANAlways, VXLANCrossSubnet:
	default:
		return fmt.Errorf("lab %q: vxlan mode %q: want Never, Always or CrossSubnet", o.Name, o.VXLAN)
	}
	if o.Backend == BackendVXLAN && o.VXLAN == VXLANNever {
		return fmt.Errorf("lab %q: backend vxlan runs no BGP: its pool needs vxlan Always or CrossSubnet", o.Name)
	}
	if o.Backend == BackendVXLAN && (o.RR != RRNone || o.Border) {
		return fmt.Errorf("lab %q: backend vxlan runs no BGP: no route reflector or border router", o.Name)
	}
	return nil
}

// bgp says whether the lab's nodes run BGP.
func (o Options) bgp() bool { return o.Backend != BackendVXLAN }

// subnetOf is the subnet (0 or 1) of node index i.
func (l *Lab) subnetOf(i int) int {
	if l.st.Options.Subnets == 2 {
		return (i - 1) % 2
	}
	return 0
}

// nodeAddrs are node index i's addresses: IPv4 in its subnet, IPv6
// (fd00:198:18:<subnet>::<10+i>) when the lab has IPv6.
func (l *Lab) nodeAddrs(i int) (v4, v6 netip.Addr) {
	s := l.subnetOf(i)
	v4 = netip.AddrFrom4([4]byte{198, 18, byte(s), byte(10 + i)})
	if l.st.Options.IPv6 {
		// The last group reads as the IPv4 address's last byte (::11).
		g, _ := strconv.ParseUint(strconv.Itoa(10+i), 16, 16)
		v6 = netip.AddrFrom16([16]byte{0xfd, 0, 0x01, 0x98, 0, 0x18, 0, byte(s), 14: byte(g >> 8), 15: byte(g)})
	}
	return v4, v6
}

// bridgeOf is the fabric bridge of a subnet.
func bridgeOf(subnet int) string { return "br" + strconv.Itoa(subnet) }

// makeRouter gives a two-subnet lab its second bridge and the router
// namespace joining the two (forwarding in that namespace only; no route
// leads anywhere else).
func (l *Lab) makeRouter(ctx context.Context) error {
	fab := l.fabricNS()
	if _, err := run(ctx, "ip", "-n", fab, "link", "add", "br1", "type", "bridge"); err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", fab, "link", "set", "br1", "up"); err != nil {
		return err
	}
	l.say("creating router namespace %s: 198.18.0.1 on br0, 198.18.1.1 on br1", l.st.Prefix+"router")
	ns, err := l.newNS(ctx, "router")
	if err != nil {
		return err
	}
	for s := 0; s < 2; s++ {
		dev := "eth" + strconv.Itoa(s)
		steps := [][]string{
			{"ip", "-n", fab, "link", "add", "router" + strconv.Itoa(s), "type", "veth", "peer", "name", dev, "netns", ns},
			{"ip", "-n", fab, "link", "set", "router" + strconv.Itoa(s), "master", bridgeOf(s), "up"},
			{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(routerAddrs[s], 24).String(), "dev", dev},
			{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(routerAddr6[s], 64).String(), "dev", dev, "nodad"},
			{"ip", "-n", ns, "link", "set", dev, "up"},
		}
		for _, st := range steps {
			if _, err := run(ctx, st...); err != nil {
				return err
			}
		}
	}
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/ipv6/conf/all/forwarding", "1"}} {
		if err := inNS(ns, func() error { return os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0o644) }); err != nil {
			return fmt.Errorf("router: %s: %w", kv[0], err)
		}
	}
	return nil
}

// attachNode makes node n's namespace on its subnet's bridge, with its
// addresses and, in a two-subnet lab, a route to the other subnet through
// the router (198.18.0.0/23, fd00:198:18::/63: the lab's own ranges).
func (l *Lab) attachNode(ctx context.Context, n Node) error {
	ns, err := l.newNS(ctx, n.Name)
	if err != nil {
		return err
	}
	s := l.subnetOf(n.Index)
	fab := l.fabricNS()
	steps := [][]string{
		{"ip", "-n", fab, "link", "add", n.Name, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", fab, "link", "set", n.Name, "master", bridgeOf(s), "up"},
		{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(n.IP, 24).String(), "dev", "eth0"},
	}
	if n.IP6.IsValid() {
		steps = append(steps, []string{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(n.IP6, 64).String(), "dev", "eth0", "nodad"})
	}
	steps = append(steps, []string{"ip", "-n", ns, "link", "set", "eth0", "up"})
	if l.st.Options.Subnets == 2 {
		steps = append(steps, []string{"ip", "-n", ns, "route", "add", "198.18.0.0/23", "via", routerAddrs[s].String()})
		if n.IP6.IsValid() {
			steps = append(steps, []string{"ip", "-n", ns, "-6", "route", "add", "fd00:198:18::/63", "via", routerAddr6[s].String()})
		}
	}
	for _, st := range steps {
		if _, err := run(ctx, st...); err != nil {
			return err
		}
	}
	return nil
}

// overlayEnv is the part of calico-node's environment the overlay options
// set.
func (l *Lab) overlayEnv(n Node) []string {
	o := l.st.Options
	env := []string{"CALICO_NETWORKING_BACKEND=" + o.Backend, "CALICO_IPV4POOL_VXLAN=" + o.VXLAN}
	if n.IP6.IsValid() {
		env = append(env, "IP6="+netip.PrefixFrom(n.IP6, 64).String(), "CALICO_IPV6POOL_CIDR="+PoolCIDR6, "CALICO_IPV6POOL_VXLAN="+o.VXLAN)
	}
	return env
}

// MTUFile is where a node's felix writes the pod MTU (beside its nodename
// file, where the CNI plugin reads it).
func (l *Lab) MTUFile(node string) string { return l.nodeDir(node, "mtu") }

// waitMTU waits until felix on n has written the pod MTU, so the node's
// first pods get it.
func (l *Lab) waitMTU(ctx context.Context, n Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(l.MTUFile(n.Name)); err == nil && strings.TrimSpace(string(b)) != "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("calico-node on %s: no pod MTU in %s after %s:\n%s", n.Name, l.MTUFile(n.Name), timeout, tail(l.nodeDir(n.Name, "calico-node.log"), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cniIPAM is the CNI configuration's ipam section: calico-ipam, with an
// IPv6 address too when the lab has IPv6.
func (l *Lab) cniIPAM(n Node) map[string]any {
	if l.st.Options.HostLocal {
		return map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": HostLocalSubnet(n.Index)}}},
			"dataDir": l.nodeDir(n.Name, "host-local")}
	}
	ipam := map[string]any{"type": "calico-ipam"}
	if l.st.Options.IPv6 {
		ipam["assign_ipv6"] = "true"
	}
	return ipam
}

// HostLocalSubnet is the host-local range of node index (Options.HostLocal):
// 10.70.<index>.0/24.
func HostLocalSubnet(index int) string { return fmt.Sprintf("10.70.%d.0/24", index) }

// overlayRouteProto is the protocol of felix's overlay routes.
const overlayRouteProto = "80"

// OverlayRoutes reads the routes felix's VXLAN overlay programmed in a
// namespace (both families).
func (l *Lab) OverlayRoutes(ctx context.Context, target string) ([]BGPRoute, error) {
	ns, err := l.Target(target)
	if err != nil {
		return nil, err
	}
	var rs []BGPRoute
	for _, fam := range []string{"-4", "-6"} {
		out, err := run(ctx, "ip", "-n", ns, fam, "-o", "route", "show", "proto", overlayRouteProto)
		if err != nil {
			return nil, err
		}
		rs = append(rs, parseRoutes(out)...)
	}
	return rs, nil
}

// missingOverlayRoutes names, for every node, the other nodes' pod
// addresses no overlay route (other than a blackhole) covers.
func (l *Lab) missingOverlayRoutes(ctx context.Context) []string {
	var missing []string
	for _, n := range l.Nodes() {
		rs, err := l.OverlayRoutes(ctx, n.Name)
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		for _, p := range l.Pods() {
			if p.Node == n.Name {
				continue
			}
			for _, a := range []netip.Addr{p.IP, p.IP6} {
				if a.IsValid() && !routed(rs, a) {
					missing = append(missing, fmt.Sprintf("%s has no overlay route to %s (%s on %s)", n.Name, a, p.Key(), p.Node))
				}
			}
		}
	}
	return missing
}

// routed says whether the most specific of rs covering a has a next hop.
func routed(rs []BGPRoute, a netip.Addr) bool {
	best := -1
	for i, r := range rs {
		if r.Prefix.Contains(a) && (best < 0 || r.Prefix.Bits() > rs[best].Prefix.Bits()) {
			best = i
		}
	}
	return best >= 0 && len(rs[best].Via) > 0
}
