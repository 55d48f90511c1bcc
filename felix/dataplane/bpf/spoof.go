package bpf

import (
	"net/netip"

	"github.com/palisade-net/palisade/felix/calc"
)

// spoofablePrefixes are the sources besides its own addresses a workload
// may send from.
func spoofablePrefixes(ep *calc.Endpoint, cfg *calc.Config) []netip.Prefix { return nil }
