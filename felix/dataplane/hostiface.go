package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// hostIfaces finds the interface of host endpoints named only by their
// expectedIPs: the interface that holds one of those addresses.
type hostIfaces struct {
	h *netlink.Handle
	// resolved keeps one copy per endpoint value and interface, so the
	// renderer sees the same pointer until either changes.
	resolved map[calc.EndpointID]resolvedEP
}

// resolvedEP is a copy of src with the interface filled in.
type resolvedEP struct{ src, ep *calc.Endpoint }

func newHostIfaces(run *nsexec.Runner) (*hostIfaces, error) {
	var h *netlink.Handle
	var err error
	if run.Handle() >= 0 {
		h, err = netlink.NewHandleAt(run.Handle())
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	return &hostIfaces{h: h, resolved: map[calc.EndpointID]resolvedEP{}}, nil
}

func (hi *hostIfaces) close() { hi.h.Close() }

// endpoints returns eps with every host endpoint that has no interface
// name replaced by a copy naming the interface holding one of its
// addresses (left out while no interface does).
func (hi *hostIfaces) endpoints(eps map[calc.EndpointID]*calc.Endpoint) (map[calc.EndpointID]*calc.Endpoint, error) {
	var byAddr map[netip.Addr]string
	out := eps
	for id, ep := range eps {
		if id.Kind != calc.HostEndpoint || ep.InterfaceName != "" {
			continue
		}
		if byAddr == nil {
			addrs, err := hi.h.AddrList(nil, netlink.FAMILY_ALL)
			if err != nil {
				return eps, fmt.Errorf("listing addresses for host endpoints: %w", err)
			}
			byAddr = map[netip.Addr]string{}
			for _, a := range addrs {
				ip, _ := netip.AddrFromSlice(a.IP)
				if l, err := hi.h.LinkByIndex(a.LinkIndex); err == nil {
					byAddr[ip.Unmap()] = l.Attrs().Name
				}
			}
			out = make(map[calc.EndpointID]*calc.Endpoint, len(eps))
			for k, v := range eps {
				out[k] = v
			}
		}
		iface := ""
		for _, n := range append(append([]netip.Prefix(nil), ep.IPv4Nets...), ep.IPv6Nets...) {
			if name, ok := byAddr[n.Addr()]; ok {
				iface = name
				break
			}
		}
		if iface == "" {
			delete(out, id)
			delete(hi.resolved, id)
			continue
		}
		r, ok := hi.resolved[id]
		if !ok || r.src != ep || r.ep.InterfaceName != iface {
			c := *ep
			c.InterfaceName = iface
			r = resolvedEP{src: ep, ep: &c}
			hi.resolved[id] = r
		}
		out[id] = r.ep
	}
	for id := range hi.resolved {
		if _, ok := eps[id]; !ok {
			delete(hi.resolved, id)
		}
	}
	return out, nil
}
