package policy

import (
	"fmt"
	"math/bits"
	"net/netip"
)

// interp runs the engine as c/engine.h does, word for word, on a
// SliceMem: the layout's tests check it without the kernel (the
// differential test then checks the program against it).
type interp struct {
	mem   SliceMem
	id6   *fakeID6
	ports func(set uint64, addr netip.Addr, proto uint8, port uint16) bool
}

// ipkt is the state's fields the engine reads.
type ipkt struct {
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
	icmpType     uint8
	icmpCode     uint8
}

type iresult struct {
	fail    bool
	verdict int // actAllow, actDeny, actNone
	id      uint64
	counted []uint64 // Log and Pass rules passed, in order
	logged  []int    // Log slots
}

func (it *interp) rd(i uint32) uint64   { return it.mem[i&(Words-1)] }
func (it *interp) rd32(i uint32) uint32 { return it.mem.Load32(i & (2*Words - 1)) }

func (it *interp) table256(e, v uint32) uint32 {
	if e&tableBit != 0 {
		e = it.rd32(2*(e&^tableBit) + (v>>8)&0xff)
		if e&tableBit != 0 {
			e = it.rd32(2*(e&^tableBit) + v&0xff)
		}
	}
	return e
}

func (it *interp) ident(a netip.Addr, addr uint64) uint32 {
	if a.Is4() {
		u := v4u(a)
		return it.table256(it.rd32(2*uint32(addr)+u>>16), u)
	}
	return it.id6.lookup(uint32(addr>>32), a)
}

func (it *interp) run(slot uint32, p ipkt) iresult {
	fail := iresult{fail: true}
	h := it.rd32(2*memSlots + slot&0xffff)
	if h < memZero {
		return fail
	}
	info := it.rd(h + phInfo)
	if info>>56 != engineVersion {
		return fail
	}
	W, nsig, flags := uint32(info>>32)&0xff, uint32(info>>40)&0xff, uint32(info>>48)&0xff
	if W == 0 || W > 16 || nsig > 15 {
		return fail
	}
	var rec [4]uint32
	ports := it.rd(h + phPorts)
	fam := 4
	if p.src.Is6() {
		fam = 6
	}
	if flags&(1<<dimL4) != 0 {
		row := uint32(p.proto)
		if fam == 6 {
			row += 256
		}
		v := uint32(p.dport)
		if icmpRow(fam, p.proto) {
			v = uint32(p.icmpType)<<8 | uint32(p.icmpCode)
		}
		rec[dimL4] = it.table256(it.rd32(2*uint32(ports)+row), v)
	}
	if flags&(1<<dimSport) != 0 {
		rec[dimSport] = it.table256(tableBit|uint32(ports>>32), uint32(p.sport))
	}
	if flags&(1<<dimSrc|1<<dimDst) != 0 {
		addr := it.rd(h + phAddr)
		idtab := it.rd(h + phIdtab)
		n := uint32(idtab >> 32)
		for side, a := range []netip.Addr{p.src, p.dst} {
			if flags&(1<<(dimSrc+side)) == 0 {
				continue
			}
			id := it.ident(a, addr)
			if id >= n {
				return fail
			}
			rec[dimSrc+side] = it.rd32(2*(uint32(idtab)+id) + uint32(side))
		}
	}
	var subs [][]uint32
	for s := range nsig {
		sg := it.rd32(2*(h+phSigs) + s)
		var sub []uint32
		live := true
		for d := range 4 {
			if sg&(1<<d) != 0 {
				so := it.rd32(2*(rec[d]+recSubs) + (sg>>(4+4*d))&7)
				if it.rd(rec[d])&(1<<s) == 0 {
					live = false
				}
				sub = append(sub, so)
			}
		}
		if live && len(sub) > 0 {
			subs = append(subs, sub)
		}
	}
	ent := it.rd(h + phEntries)
	E, U, P := uint32(ent), uint32(ent>>32), uint32(it.rd(h+phPost))
	nent := uint32(info)
	var res iresult
	pos := uint32(0)
	for steps := 0; steps < int(4*nent+64); steps++ {
		n, ok := it.first(subs, W, U, pos)
		if !ok || n >= nent {
			return fail
		}
		w0 := it.rd(E + 2*n)
		if w0&0x10 != 0 && !it.postOK(P+uint32(w0>>48), p) {
			pos = n + 1
			continue
		}
		act := int(w0 & 0xf)
		id := it.rd(E + 2*n + 1)
		if act <= actNone {
			res.verdict, res.id = act, id
			return res
		}
		if act == actLog {
			res.logged = append(res.logged, int(w0>>8)&0xfffff)
		}
		res.counted = append(res.counted, id)
		pos = uint32(w0>>28) & 0xfffff
	}
	return fail
}

// first is the first entry from pos every dimension of whose signature
// holds.
func (it *interp) first(subs [][]uint32, W, U, pos uint32) (uint32, bool) {
	for w := pos >> 12; w < W; w++ {
		cand := it.rd(U + w)
		acc := make([]uint64, len(subs))
		for l, sub := range subs {
			a := ^uint64(0)
			for _, s := range sub {
				a &= it.rd(s + 2*w)
			}
			acc[l] = a
			cand |= a
		}
		if w == pos>>12 {
			cand &= ^uint64(0) << ((pos >> 6) & 63)
		}
		for cand != 0 {
			bit := cand & -cand
			cand ^= bit
			b := w*64 + uint32(bits.TrailingZeros64(bit))
			m := it.rd(U + W + b)
			for l, sub := range subs {
				if acc[l]&bit == 0 {
					continue
				}
				t := ^uint64(0)
				for _, s := range sub {
					sw := it.rd(s + 2*w)
					if sw&bit == 0 {
						t = 0
						break
					}
					r := uint32(it.rd(s+2*w+1)) + uint32(bits.OnesCount64(sw&(bit-1)))
					t &= it.rd(s + 2*W + r)
				}
				m |= t
			}
			if b == pos>>6 {
				m &= ^uint64(0) << (pos & 63)
			}
			if m != 0 {
				return b*64 + uint32(bits.TrailingZeros64(m)), true
			}
		}
	}
	return 0, false
}

func (it *interp) postOK(at uint32, p ipkt) bool {
	n := it.rd(at)
	if n > maxPost {
		return false
	}
	for i := range uint32(n) {
		id, f := it.rd(at+1+2*i), it.rd(at+2+2*i)
		addr, port := p.dst, p.dport
		if f&1 != 0 {
			addr, port = p.src, p.sport
		}
		if it.ports(id, addr, p.proto, port) == (f&2 != 0) {
			return false
		}
	}
	return true
}

// fakeID6 is pal_id6 in a map.
type fakeID6 struct {
	m map[uint32]map[netip.Prefix]uint32
}

func newFakeID6() *fakeID6 { return &fakeID6{m: map[uint32]map[netip.Prefix]uint32{}} }

func (f *fakeID6) Put(p netip.Prefix, gen, id uint32) error {
	if f.m[gen] == nil {
		f.m[gen] = map[netip.Prefix]uint32{}
	}
	f.m[gen][p] = id
	return nil
}

func (f *fakeID6) Delete(p netip.Prefix, gen uint32) error {
	if _, ok := f.m[gen][p]; !ok {
		return fmt.Errorf("no key %s", p)
	}
	delete(f.m[gen], p)
	return nil
}

func (f *fakeID6) lookup(gen uint32, a netip.Addr) uint32 {
	best, id := -1, uint32(0)
	for p, v := range f.m[gen] {
		if p.Contains(a) && p.Bits() > best {
			best, id = p.Bits(), v
		}
	}
	return id
}
