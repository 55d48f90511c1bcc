package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// lbMaps keeps the load balancer's maps (pal_svc, pal_be, pal_be_live:
// bpf/c/nat.h) equal to the calc's LoadBalancer. Each apply after a change
// reads the three maps and writes the difference: a frontend's new
// backends before its count, the count before the backends past it are
// deleted, so a new flow always finds a backend the frontend has; the
// flows' translations (pal_nat) are the programs' and are kept while
// their backend stays one of the frontend's.
type lbMaps struct {
	want  *calc.LoadBalancer
	dirty bool
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

// lbWant is the maps' wanted content.
type lbWant struct {
	svc  map[palbpf.ServiceKey]palbpf.ServiceValue
	be   map[palbpf.BackendKey]palbpf.BackendValue
	live map[palbpf.BackendLiveKey]struct{}
}

func (l *lbMaps) wanted() lbWant {
	w := lbWant{svc: map[palbpf.ServiceKey]palbpf.ServiceValue{}, be: map[palbpf.BackendKey]palbpf.BackendValue{}, live: map[palbpf.BackendLiveKey]struct{}{}}
	if l.want == nil {
		return w
	}
	for f, fb := range l.want.Frontends {
		proto, ok := lbProtos[f.Proto]
		if !ok {
			continue // SCTP: not load-balanced by the programs (docs/bpf.md)
		}
		id := frontendID(f)
		w.svc[palbpf.ServiceKey{Addr: palbpf.Addr16(f.Addr), Port: f.Port, Proto: proto}] = palbpf.ServiceValue{Id: id, Count: uint32(len(fb.Backends))}
		for i, b := range fb.Backends {
			w.be[palbpf.BackendKey{Id: id, Idx: uint32(i)}] = palbpf.BackendValue{Addr: palbpf.Addr16(b.Addr()), Port: b.Port()}
			w.live[palbpf.BackendLiveKey{Id: id, Port: b.Port(), Addr: palbpf.Addr16(b.Addr())}] = struct{}{}
		}
	}
	return w
}

// apply writes the difference between the maps and the wanted content.
func (l *lbMaps) apply(objs *palbpf.Objects) error {
	if !l.dirty {
		return nil
	}
	w := l.wanted()
	svcM, beM, liveM := objs.Maps[palbpf.MapServices], objs.Maps[palbpf.MapBackends], objs.Maps[palbpf.MapBackendsLive]
	var errs []error
	put := func(m *ebpf.Map, what string, k, v any) {
		if err := m.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("bpf: writing %s %+v: %w", what, k, err))
		}
	}
	del := func(m *ebpf.Map, what string, k any) {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("bpf: deleting %s %+v: %w", what, k, err))
		}
	}
	haveBe := map[palbpf.BackendKey]palbpf.BackendValue{}
	var bk palbpf.BackendKey
	var bv palbpf.BackendValue
	for it := beM.Iterate(); it.Next(&bk, &bv); {
		haveBe[bk] = bv
	}
	haveLive := map[palbpf.BackendLiveKey]struct{}{}
	var lk palbpf.BackendLiveKey
	var one uint8
	for it := liveM.Iterate(); it.Next(&lk, &one); {
		haveLive[lk] = struct{}{}
	}
	haveSvc := map[palbpf.ServiceKey]palbpf.ServiceValue{}
	var sk palbpf.ServiceKey
	var sv palbpf.ServiceValue
	for it := svcM.Iterate(); it.Next(&sk, &sv); {
		haveSvc[sk] = sv
	}
	for k, v := range w.be {
		if h, ok := haveBe[k]; !ok || h != v {
			put(beM, "backend", k, v)
		}
	}
	for k := range w.live {
		if _, ok := haveLive[k]; !ok {
			put(liveM, "backend", k, uint8(1))
		}
	}
	for k, v := range w.svc {
		if h, ok := haveSvc[k]; !ok || h != v {
			put(svcM, "frontend", k, v)
		}
	}
	for k := range haveSvc {
		if _, ok := w.svc[k]; !ok {
			del(svcM, "frontend", k)
		}
	}
	for k := range haveBe {
		if _, ok := w.be[k]; !ok {
			del(beM, "backend", k)
		}
	}
	for k := range haveLive {
		if _, ok := w.live[k]; !ok {
			del(liveM, "backend", k)
		}
	}
	if len(errs) == 0 {
		l.dirty = false
	}
	return errors.Join(errs...)
}
