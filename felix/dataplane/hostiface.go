package dataplane

import (
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// hostIfaces resolves host endpoints against the interfaces of the node:
// an endpoint named only by its expectedIPs gets the interface holding
// one of those addresses, and no endpoint is placed on an interface that
// FelixConfiguration's interfaceExclude names.
type hostIfaces struct {
	h *netlink.Handle
	// exclude is interfaceExclude parsed; excludeSrc the list it came from.
	exclude    ifaceExclusion
	excludeSrc []string
	// resolved keeps one copy per endpoint value and interface, so the
	// renderer sees the same pointer until either changes.
	resolved map[calc.EndpointID]resolvedEP
}

// resolvedEP is a copy of src with the interface filled in.
type resolvedEP struct{ src, ep *calc.Endpoint }

func newHostIfaces(run *nsexec.Runner) (*hostIfaces, error) {
	h, err := run.Netlink()
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	hi := &hostIfaces{h: h, resolved: map[calc.EndpointID]resolvedEP{}}
	// Calico's default until a configuration arrives.
	hi.configure(calc.MergeConfig(nil, nil), nil)
	return hi, nil
}

func (hi *hostIfaces) close() { hi.h.Close() }

// configure takes the interfaceExclude of a new configuration (the
// driver renders again after every configuration, which resolves the
// endpoints again).
func (hi *hostIfaces) configure(cfg *calc.Config, logger *log.Entry) {
	if hi.excludeSrc != nil && slices.Equal(cfg.InterfaceExclude, hi.excludeSrc) {
		return
	}
	hi.excludeSrc = append([]string{}, cfg.InterfaceExclude...)
	hi.exclude = parseIfaceExclusion(cfg.InterfaceExclude)
	if len(hi.exclude.invalid) > 0 && logger != nil {
		logger.WithField("interfaceExclude", hi.exclude.invalid).Warn("Ignoring interfaceExclude entries that are not valid regular expressions")
	}
	hi.resolved = map[calc.EndpointID]resolvedEP{}
}

// endpoints returns eps with every host endpoint that has no interface
// name replaced by a copy naming the interface holding one of its
// addresses (left out while no interface does), and without the host
// endpoints whose interface is excluded. Excluded interfaces are not
// considered when matching addresses. The interface "*" (all interfaces)
// is passed on as it is.
func (hi *hostIfaces) endpoints(eps map[calc.EndpointID]*calc.Endpoint) (map[calc.EndpointID]*calc.Endpoint, error) {
	var byAddr map[netip.Addr]string
	out, copied := eps, false
	own := func() {
		if !copied {
			out, copied = make(map[calc.EndpointID]*calc.Endpoint, len(eps)), true
			for k, v := range eps {
				out[k] = v
			}
		}
	}
	for id, ep := range eps {
		if id.Kind != calc.HostEndpoint {
			continue
		}
		if ep.InterfaceName != "" {
			if ep.InterfaceName != "*" && hi.exclude.excludes(ep.InterfaceName) {
				own()
				delete(out, id)
			}
			continue
		}
		if byAddr == nil {
			var err error
			if byAddr, err = hi.addresses(); err != nil {
				return eps, err
			}
		}
		own()
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

// addresses maps each address of the node to the interface holding it,
// leaving out excluded interfaces.
func (hi *hostIfaces) addresses() (map[netip.Addr]string, error) {
	addrs, err := hi.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses for host endpoints: %w", err)
	}
	byAddr := map[netip.Addr]string{}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		l, err := hi.h.LinkByIndex(a.LinkIndex)
		if err != nil || hi.exclude.excludes(l.Attrs().Name) {
			continue
		}
		byAddr[ip.Unmap()] = l.Attrs().Name
	}
	return byAddr, nil
}
