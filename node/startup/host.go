package startup

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Interface is one network interface and its addresses with their prefix
// lengths, as the kernel reports them.
type Interface struct {
	Name  string
	Index int
	Up    bool
	Addrs []netip.Prefix
}

// Host is what startup reads from the kernel.
type Host interface {
	// Interfaces lists the host's interfaces in index order.
	Interfaces() ([]Interface, error)
	// SourceFor returns the local address the kernel would send from to
	// reach dst (a route lookup; nothing is sent).
	SourceFor(dst netip.Addr) (netip.Addr, error)
}

// NetlinkHost reads the kernel through a netlink handle; a handle made
// with netlink.NewHandleAt reads another network namespace without moving
// the calling thread.
type NetlinkHost struct {
	Handle *netlink.Handle
}

// Interfaces implements Host.
func (h NetlinkHost) Interfaces() ([]Interface, error) {
	links, err := h.Handle.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var out []Interface
	for _, l := range links {
		a := l.Attrs()
		ifc := Interface{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0}
		addrs, err := h.Handle.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok {
				continue
			}
			ones, _ := ad.Mask.Size()
			ifc.Addrs = append(ifc.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, ifc)
	}
	sortByIndex(out)
	return out, nil
}

// SourceFor implements Host.
func (h NetlinkHost) SourceFor(dst netip.Addr) (netip.Addr, error) {
	routes, err := h.Handle.RouteGet(dst.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", dst, err)
	}
	for _, r := range routes {
		if src, ok := netip.AddrFromSlice(r.Src); ok && src.IsValid() {
			return src.Unmap(), nil
		}
	}
	return netip.Addr{}, errors.New("the kernel chose no source address for " + dst.String())
}

func sortByIndex(ifs []Interface) {
	for i := 1; i < len(ifs); i++ {
		for j := i; j > 0 && ifs[j].Index < ifs[j-1].Index; j-- {
			ifs[j], ifs[j-1] = ifs[j-1], ifs[j]
		}
	}
}
