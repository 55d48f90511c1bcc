package bpf

import (
	"net/netip"
	"reflect"

	"github.com/palisade-net/palisade/felix/calc"
)

// The calc fields below come with felix's anti-spoofing and failsafe-net
// work (calc.Endpoint.AllowSpoofedSourcePrefixes, set only with
// workloadSourceSpoofing: Any; calc.ProtoPort.Net). They are read by name
// so this dataplane honours them as soon as calc has them; once it does,
// these two become plain field reads.

// spoofablePrefixes are the sources besides its own addresses a workload
// may send from.
func spoofablePrefixes(ep *calc.Endpoint, _ *calc.Config) []netip.Prefix {
	f := reflect.ValueOf(ep).Elem().FieldByName("AllowSpoofedSourcePrefixes")
	if !f.IsValid() {
		return nil
	}
	out, _ := f.Interface().([]netip.Prefix)
	return out
}

// failsafeNet is the remote range a failsafe port is limited to (none:
// every address).
func failsafeNet(p calc.ProtoPort) netip.Prefix {
	f := reflect.ValueOf(p).FieldByName("Net")
	if !f.IsValid() {
		return netip.Prefix{}
	}
	n, _ := f.Interface().(netip.Prefix)
	return n
}
