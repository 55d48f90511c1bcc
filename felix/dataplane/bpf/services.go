package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// lbMaps keeps the load balancer's maps (pal_svc, pal_be, pal_be_live:
// bpf/c/nat.h) equal to the calc's LoadBalancer. It mirrors what the maps
// hold (have), read back in batches at start and at every refresh (a
// tampered map is repaired), and an apply after a change writes only the
// entries of the frontends whose backends changed: a frontend's new
// backends before its count, the count before the backends past it are
// deleted, so a new flow always finds a backend the frontend has; the
// flows' translations (pal_nat) are the programs' and are kept while
// their backend stays one of the frontend's.
type lbMaps struct {
	want  *calc.LoadBalancer
	dirty bool
	// have mirrors the maps (nil: read them back first); applied are the
	// frontends have was last made equal to (nil: every entry is
	// compared).
	have    *lbWant
	applied map[calc.Frontend]calc.FrontendBackends
	bufs    struct {
		svc  batchBuf[palbpf.ServiceKey, palbpf.ServiceValue]
		be   batchBuf[palbpf.BackendKey, palbpf.BackendValue]
		live batchBuf[palbpf.BackendLiveKey, uint8]
	}
}

// resync makes the next apply read the maps back and compare them whole.
func (l *lbMaps) resync() {
	l.have, l.applied = nil, nil
	l.dirty = l.want != nil
}

// OnLoadBalancerUpdate implements calc.ServiceDataplane.
func (d *Driver) OnLoadBalancerUpdate(lb *calc.LoadBalancer) {
	d.lb.want = lb
	d.lb.dirty = true
}

var lbProtos = map[string]uint8{"tcp": 6, "udp": 17}

// frontendID is a frontend's id in the maps: the first bytes of the
// SHA-256 of what it is, the same in every felix (a restarted one finds
// its backends).
func frontendID(f calc.Frontend) uint32 {
	sum := sha256.Sum256([]byte(f.Proto + "/" + f.Addr.String() + "/" + strconv.Itoa(int(f.Port))))
	return binary.BigEndian.Uint32(sum[:4])
}

// lbWant is the maps' content, wanted or held.
type lbWant struct {
	svc  map[palbpf.ServiceKey]palbpf.ServiceValue
	be   map[palbpf.BackendKey]palbpf.BackendValue
	live map[palbpf.BackendLiveKey]struct{}
}

func newLBWant() *lbWant {
	return &lbWant{svc: map[palbpf.ServiceKey]palbpf.ServiceValue{}, be: map[palbpf.BackendKey]palbpf.BackendValue{}, live: map[palbpf.BackendLiveKey]struct{}{}}
}

// add puts a frontend's entries in w (none for a protocol the programs
// do not balance: SCTP, docs/bpf.md).
func (w *lbWant) add(f calc.Frontend, fb calc.FrontendBackends) {
	proto, ok := lbProtos[f.Proto]
	if !ok {
		return
	}
	id := frontendID(f)
	w.svc[palbpf.ServiceKey{Addr: palbpf.Addr16(f.Addr), Port: f.Port, Proto: proto}] = palbpf.ServiceValue{Id: id, Count: uint32(len(fb.Backends))}
	for i, b := range fb.Backends {
		w.be[palbpf.BackendKey{Id: id, Idx: uint32(i)}] = palbpf.BackendValue{Addr: palbpf.Addr16(b.Addr()), Port: b.Port()}
		w.live[palbpf.BackendLiveKey{Id: id, Port: b.Port(), Addr: palbpf.Addr16(b.Addr())}] = struct{}{}
	}
}

// readBack reads the three maps into a new mirror.
func (l *lbMaps) readBack(objs *palbpf.Objects) (*lbWant, error) {
	h := newLBWant()
	err := errors.Join(
		l.bufs.svc.walk(objs.Maps[palbpf.MapServices], 1, func(ks []palbpf.ServiceKey, vs []palbpf.ServiceValue) {
			for i, k := range ks {
				h.svc[k] = vs[i]
			}
		}),
		l.bufs.be.walk(objs.Maps[palbpf.MapBackends], 1, func(ks []palbpf.BackendKey, vs []palbpf.BackendValue) {
			for i, k := range ks {
				h.be[k] = vs[i]
			}
		}),
		l.bufs.live.walk(objs.Maps[palbpf.MapBackendsLive], 1, func(ks []palbpf.BackendLiveKey, _ []uint8) {
			for _, k := range ks {
				h.live[k] = struct{}{}
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("bpf: reading the Service maps back: %w", err)
	}
	return h, nil
}

// apply writes the difference between the maps and the wanted content:
// of every entry after a read back, else of the frontends that changed.
func (l *lbMaps) apply(objs *palbpf.Objects) error {
	if !l.dirty {
		return nil
	}
	if l.have == nil {
		h, err := l.readBack(objs)
		if err != nil {
			return err
		}
		l.have, l.applied = h, nil
	}
	// target holds the wanted entries of the frontends in scope; old
	// the entries those frontends may hold now.
	target, old := newLBWant(), newLBWant()
	var fronts map[calc.Frontend]calc.FrontendBackends
	if l.want != nil {
		fronts = l.want.Frontends
	}
	if l.applied == nil {
		for f, fb := range fronts {
			target.add(f, fb)
		}
		old = l.have
	} else {
		for f, fb := range fronts {
			if was, ok := l.applied[f]; !ok || !slices.Equal(was.Backends, fb.Backends) {
				target.add(f, fb)
				if ok {
					old.add(f, was)
				}
			}
		}
		for f, was := range l.applied {
			if _, ok := fronts[f]; !ok {
				old.add(f, was)
			}
		}
	}
	err := l.write(objs, target, old)
	if err != nil {
		l.have, l.applied = nil, nil // read back before the next try
		return err
	}
	l.applied = fronts
	l.dirty = false
	return nil
}

// write puts target's entries that differ from the mirror, then deletes
// old's that target has not (the mirror follows).
func (l *lbMaps) write(objs *palbpf.Objects, target, old *lbWant) error {
	svcM, beM, liveM := objs.Maps[palbpf.MapServices], objs.Maps[palbpf.MapBackends], objs.Maps[palbpf.MapBackendsLive]
	h := l.have
	var beK []palbpf.BackendKey
	var beV []palbpf.BackendValue
	for k, v := range target.be {
		if hv, ok := h.be[k]; !ok || hv != v {
			beK, beV = append(beK, k), append(beV, v)
		}
	}
	var liveK []palbpf.BackendLiveKey
	for k := range target.live {
		if _, ok := h.live[k]; !ok {
			liveK = append(liveK, k)
		}
	}
	var svcK []palbpf.ServiceKey
	var svcV []palbpf.ServiceValue
	for k, v := range target.svc {
		if hv, ok := h.svc[k]; !ok || hv != v {
			svcK, svcV = append(svcK, k), append(svcV, v)
		}
	}
	if err := putAll(beM, "backend", beK, beV); err != nil {
		return err
	}
	for i, k := range beK {
		h.be[k] = beV[i]
	}
	if err := putAll(liveM, "backend", liveK, make([]uint8, len(liveK))); err != nil {
		return err
	}
	for _, k := range liveK {
		h.live[k] = struct{}{}
	}
	if err := putAll(svcM, "frontend", svcK, svcV); err != nil {
		return err
	}
	for i, k := range svcK {
		h.svc[k] = svcV[i]
	}
	svcD := stale(old.svc, target.svc)
	if _, err := deleteAll(svcM, svcD); err != nil {
		return fmt.Errorf("bpf: deleting frontends: %w", err)
	}
	for _, k := range svcD {
		delete(h.svc, k)
	}
	beD := stale(old.be, target.be)
	if _, err := deleteAll(beM, beD); err != nil {
		return fmt.Errorf("bpf: deleting backends: %w", err)
	}
	for _, k := range beD {
		delete(h.be, k)
	}
	liveD := stale(old.live, target.live)
	if _, err := deleteAll(liveM, liveD); err != nil {
		return fmt.Errorf("bpf: deleting backends: %w", err)
	}
	for _, k := range liveD {
		delete(h.live, k)
	}
	return nil
}

// stale are old's keys that target has not.
func stale[K comparable, V any](old, target map[K]V) []K {
	var out []K
	for k := range old {
		if _, ok := target[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// putAll writes keys and values in batches.
func putAll[K, V any](m *ebpf.Map, what string, keys []K, vals []V) error {
	for len(keys) > 0 {
		n := min(len(keys), batchSize)
		if _, err := m.BatchUpdate(keys[:n], vals[:n], nil); err != nil {
			return fmt.Errorf("bpf: writing %s entries: %w", what, err)
		}
		keys, vals = keys[n:], vals[n:]
	}
	return nil
}
