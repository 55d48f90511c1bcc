package startup

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	log "github.com/sirupsen/logrus"
)

// Address is the outcome of resolving IP or IP6.
type Address struct {
	// Prefix is the address with its subnet's prefix length; invalid when
	// the node has no address of the family.
	Prefix netip.Prefix
	// Interface is where the address was found ("" when it is on none).
	Interface string
	// Source says how it was chosen: "none", "configured", "stored" or the
	// autodetection method.
	Source string
}

// ResolveAddress chooses the node's address of one family from setting
// (the IP or IP6 value), the autodetection method and the address stored
// on an existing Node (stored, possibly empty):
//
//   - "none" (and, for IPv6, empty): no address;
//   - empty: the stored address, else autodetection;
//   - "autodetect": autodetection, always;
//   - an address: that address.
//
// An address without prefix length (configured or stored) takes the prefix
// length of the interface that carries it, so a node never advertises a
// wrong /32 (a stored /32 that an interface knows better is corrected too).
// An address on no interface is kept, as Calico keeps it, with a warning
// and the host-length prefix when it had none. A configured prefix length
// that differs from the interface's is kept with a warning.
func ResolveAddress(ctx context.Context, h Host, setting, method string, v6 bool, stored string) (Address, error) {
	name := "IP"
	if v6 {
		name = "IP6"
	}
	setting = strings.TrimSpace(setting)
	switch {
	case strings.EqualFold(setting, AddressNone), setting == "" && v6 && stored == "":
		return Address{Source: AddressNone}, nil
	case setting == "" && stored != "":
		p, err := parseAddress(stored)
		if err != nil {
			return Address{}, fmt.Errorf("stored %s address %q: %w", name, stored, err)
		}
		return fromInterfaces(h, name, p, false, "stored")
	case setting == "" || strings.EqualFold(setting, AddressAutodetect):
		m, err := ParseMethod(method)
		if err != nil {
			return Address{}, err
		}
		p, ifc, err := Detect(ctx, h, m, v6)
		if err != nil {
			return Address{}, fmt.Errorf("autodetecting %s address: %w", name, err)
		}
		log.WithFields(log.Fields{"address": p, "interface": ifc, "method": m.String()}).Info("Autodetected node address")
		return Address{Prefix: p, Interface: ifc, Source: m.String()}, nil
	}
	p, err := parseAddress(setting)
	if err != nil {
		return Address{}, fmt.Errorf("%s %q: %w", name, setting, err)
	}
	explicit := strings.Contains(setting, "/")
	return fromInterfaces(h, name, p, explicit, "configured")
}

// fromInterfaces completes a given address with the prefix length of the
// interface carrying it.
func fromInterfaces(h Host, name string, p netip.Prefix, explicitPrefix bool, source string) (Address, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return Address{}, err
	}
	found, ifc, ok := findAddress(ifs, p.Addr())
	logger := log.WithFields(log.Fields{"setting": name, "address": p.String()})
	switch {
	case !ok:
		logger.Warn("The node address is on no local interface; using it as given (give the prefix length, e.g. 10.0.0.1/24, to avoid a host route)")
		return Address{Prefix: p, Source: source}, nil
	case explicitPrefix && found.Bits() != p.Bits():
		logger.WithFields(log.Fields{"interface": ifc, "interfacePrefix": found.String()}).
			Warn("The configured prefix length differs from the interface's; using the configured one")
		return Address{Prefix: p, Interface: ifc, Source: source}, nil
	case !explicitPrefix && found.Bits() != p.Bits() && source == "stored":
		logger.WithFields(log.Fields{"interface": ifc, "corrected": found.String()}).
			Warn("The stored node address has the wrong prefix length; correcting it from the interface")
	}
	return Address{Prefix: found, Interface: ifc, Source: source}, nil
}
