package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// failsafeKeys are the failsafe ports of a configuration as pal_failsafe
// keys: inbound by (port, source), outbound by (port, destination).
func failsafeKeys(cfg *calc.Config) map[palbpf.FailsafeKey]struct{} {
	out := map[palbpf.FailsafeKey]struct{}{}
	for dir, ports := range [][]calc.ProtoPort{cfg.FailsafeInbound, cfg.FailsafeOutbound} {
		for _, p := range ports {
			proto := map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[p.Protocol]
			if proto == 0 {
				continue
			}
			var port [2]byte
			binary.BigEndian.PutUint16(port[:], p.Port)
			k := palbpf.FailsafeKey{Prefixlen: 32, Dir: uint8(dir), Proto: proto, Port: binary.NativeEndian.Uint16(port[:])}
			if n := failsafeNet(p); n.IsValid() {
				n = n.Masked()
				k.Prefixlen = uint32(32 + palbpf.PrefixLen16(n))
				k.Addr = palbpf.Addr16(n.Addr())
			}
			out[k] = struct{}{}
		}
	}
	return out
}

// applyFailsafe makes pal_failsafe hold the configuration's ports.
func (d *Driver) applyFailsafe() error {
	m := d.objs.Maps[palbpf.MapFailsafe]
	want := failsafeKeys(d.cfg)
	have := map[palbpf.FailsafeKey]struct{}{}
	var k palbpf.FailsafeKey
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		have[k] = struct{}{}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", palbpf.MapFailsafe, err)
	}
	var errs []error
	for k := range want {
		if _, ok := have[k]; !ok {
			if err := m.Put(k, uint8(1)); err != nil {
				errs = append(errs, fmt.Errorf("failsafe port: %w", err))
			}
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
