package lab

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-net/palisade/node/bgp/kernel"
)

// bgpRouteProto is the protocol number calico-node's BGP part marks its
// kernel routes with (routes are matched by number: iproute2 prints a
// name for numbers a routing daemon on the host has named).
var bgpRouteProto = strconv.Itoa(kernel.DefaultProtocol)

// BGPRoute is a route calico-node programmed from BGP.
type BGPRoute struct {
	Prefix netip.Prefix
	// Via lists the next hops (several for ECMP); empty for a blackhole.
	Via []netip.Addr
}

// BGPRoutes reads the routes calico-node programmed in a namespace.
func (l *Lab) BGPRoutes(ctx context.Context, target string) ([]BGPRoute, error) {
	ns, err := l.Target(target)
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, "ip", "-n", ns, "-4", "-o", "route", "show", "proto", bgpRouteProto)
	if err != nil {
		return nil, err
	}
	return parseRoutes(out), nil
}

// parseRoutes reads `ip -o route` lines: "[blackhole] PREFIX [via GW] …
// [nexthop via GW …]…".
func parseRoutes(out string) []BGPRoute {
	var rs []BGPRoute
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.ReplaceAll(line, "\\", " "))
		if len(f) == 0 {
			continue
		}
		if f[0] == "blackhole" || f[0] == "unreachable" || f[0] == "prohibit" {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		pfx, err := netip.ParsePrefix(f[0])
		if err != nil {
			a, aerr := netip.ParseAddr(f[0])
			if aerr != nil {
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		r := BGPRoute{Prefix: pfx}
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "via" {
				if a, err := netip.ParseAddr(f[i+1]); err == nil {
					r.Via = append(r.Via, a)
				}
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// routeVia says whether routes send addr to gw (the most specific
// covering route, one of its next hops).
func routeVia(rs []BGPRoute, addr, gw netip.Addr) bool {
	best := -1
	for i, r := range rs {
		if r.Prefix.Contains(addr) && (best < 0 || r.Prefix.Bits() > rs[best].Prefix.Bits()) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	for _, v := range rs[best].Via {
		if v == gw {
			return true
		}
	}
	return false
}

// WaitPodRoutes waits until every node routes every pod of the other
// nodes to that pod's node, as BGP advertised it.
// In a VXLAN lab the routes are felix's overlay routes instead.
func (l *Lab) WaitPodRoutes(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	began := time.Now()
	for {
		missing := l.missingPodRoutes(ctx)
		if len(missing) == 0 {
			return time.Since(began), nil
		}
		if time.Since(began) > timeout || ctx.Err() != nil {
			sort.Strings(missing)
			return time.Since(began), fmt.Errorf("routes missing after %s:\n  %s", timeout, strings.Join(missing, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// missingPodRoutes names the pod routes a node lacks.
func (l *Lab) missingPodRoutes(ctx context.Context) []string {
	if l.st.Options.VXLAN != VXLANNever {
		return l.missingOverlayRoutes(ctx)
	}
	var missing []string
	for _, n := range l.Nodes() {
		rs, err := l.BGPRoutes(ctx, n.Name)
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		for _, p := range l.Pods() {
			owner, ok := l.Node(p.Node)
			if !ok || p.Node == n.Name {
				continue
			}
			if !routeVia(rs, p.IP, owner.IP) {
				missing = append(missing, fmt.Sprintf("%s has no route to %s (%s) via %s", n.Name, p.IP, p.Key(), owner.IP))
			}
		}
	}
	return missing
}
