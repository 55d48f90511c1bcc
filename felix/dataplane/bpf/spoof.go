package bpf

import (
	"net/netip"

	"github.com/palisade-net/palisade/felix/calc"
)

// spoofablePrefixes are the sources besides its own addresses a workload
// may send from (calc passes them only with workloadSourceSpoofing: Any).
func spoofablePrefixes(ep *calc.Endpoint, _ *calc.Config) []netip.Prefix {
	return ep.AllowSpoofedSourcePrefixes
}

// failsafeNet is the remote range a failsafe port is limited to (none:
// every address).
func failsafeNet(p calc.ProtoPort) netip.Prefix { return p.Net }
