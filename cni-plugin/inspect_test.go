package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
)

// resultAddrs reads the addresses of a plugin result.
func resultAddrs(t testing.TB, r types.Result) (*current.Result, []netip.Prefix) {
	t.Helper()
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("result %v: %v", r, err)
	}
	var out []netip.Prefix
	for _, ip := range res.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		ones, _ := ip.Address.Mask.Size()
		out = append(out, netip.PrefixFrom(a.Unmap(), ones))
	}
	return res, out
}

func readSysctl(key string) string {
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// hostState is what a node's kernel holds for a workload.
type hostState struct {
	exists  bool
	ifindex int
	kind    string
	mac     string
	mtu     int
	up      bool
	sysctls map[string]string
	routes  []string // "dst scope"
}

func (n *node) hostState(t testing.TB, veth string) hostState {
	t.Helper()
	var s hostState
	err := n.inNode(func() error {
		link, err := netlink.LinkByName(veth)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			return err
		}
		s.exists, s.kind, s.mac, s.mtu = true, link.Type(), link.Attrs().HardwareAddr.String(), link.Attrs().MTU
		s.ifindex = link.Attrs().Index
		s.up = link.Attrs().Flags&net.FlagUp != 0
		s.sysctls = map[string]string{}
		for _, k := range []string{"net/ipv4/conf/" + veth + "/proxy_arp", "net/ipv4/neigh/" + veth + "/proxy_delay",
			"net/ipv4/conf/" + veth + "/forwarding", "net/ipv6/conf/" + veth + "/proxy_ndp", "net/ipv6/conf/" + veth + "/forwarding"} {
			s.sysctls[k] = readSysctl(k)
		}
		s.routes, err = routesOf(link)
		return err
	})
	if err != nil {
		t.Fatalf("node %s: reading %s: %v", n.name, veth, err)
	}
	return s
}

func routesOf(link netlink.Link) ([]string, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.To4() == nil && r.Dst.IP.IsLinkLocalUnicast() && r.Gw == nil {
			continue // the kernel's fe80::/64
		}
		dst := "default"
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones > 0 {
				dst = r.Dst.String()
			}
		}
		s := dst
		if r.Gw != nil {
			s += " via " + r.Gw.String()
		}
		if r.Scope == netlink.SCOPE_LINK {
			s += " scope link"
		}
		out = append(out, s)
	}
	return out, nil
}

// podState is what a workload's namespace holds.
type podState struct {
	exists bool
	mtu    int
	mac    string
	addrs  []string
	routes []string
}

func (p *pod) state(t testing.TB) podState {
	t.Helper()
	var s podState
	err := p.ns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(p.ifName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			return err
		}
		s.exists, s.mtu, s.mac = true, link.Attrs().MTU, link.Attrs().HardwareAddr.String()
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if !a.IP.IsLinkLocalUnicast() {
				s.addrs = append(s.addrs, a.IPNet.String())
			}
		}
		s.routes, err = routesOf(link)
		return err
	})
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
	return s
}

func (c *cluster) endpoint(t testing.TB, namespace, name string) *v3.WorkloadEndpoint {
	t.Helper()
	r, err := c.store.Get(context.Background(), datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: namespace, Name: name})
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading workloadendpoint %s/%s: %v", namespace, name, err)
	}
	return r.(*v3.WorkloadEndpoint)
}

func (c *cluster) profile(t testing.TB, name string) *v3.Profile {
	t.Helper()
	r, err := c.store.Get(context.Background(), datastore.Key{Kind: v3.KindProfile, Name: name})
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading profile %s: %v", name, err)
	}
	return r.(*v3.Profile)
}

// handleIPs are the addresses an IPAM handle holds (none when absent).
func (c *cluster) handleIPs(t testing.TB, handle string) []netip.Addr {
	t.Helper()
	ips, err := c.alloc.IPsByHandle(context.Background(), handle)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("handle %s: %v", handle, err)
	}
	return ips
}

// allocated lists every allocated address with its handle.
func (c *cluster) allocated(t testing.TB) map[netip.Addr]string {
	t.Helper()
	blocks, err := c.alloc.ListBlocks(context.Background())
	if err != nil {
		t.Fatalf("listing blocks: %v", err)
	}
	out := map[netip.Addr]string{}
	for _, b := range blocks {
		for _, a := range b.Allocations {
			out[a.IP] = a.HandleID
		}
	}
	return out
}

// wepName is the endpoint name of a pod on a node.
func wepName(n *node, p *pod, k8s bool) string {
	if k8s {
		return names.WorkloadEndpointName(n.name, "k8s", p.name, p.ifName)
	}
	return names.WorkloadEndpointName(n.name, "cni", p.containerID, p.ifName)
}

func hostVeth(p *pod, k8s bool) string {
	if k8s {
		return names.VethNameForWorkload(p.namespace, p.name)
	}
	return names.VethNameForContainer(p.containerID)
}

func handleOf(p *pod) string { return "k8s-pod-network." + p.containerID }

func fmtList(s []string) string { return fmt.Sprintf("%q", s) }

func netlinkHost(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}
