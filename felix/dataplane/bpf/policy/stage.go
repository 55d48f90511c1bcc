package policy

import (
	"slices"
	"sort"

	"github.com/palisade-net/palisade/bpf"
)

// Stage header words (PH_*).
const (
	phInfo    = 0
	phAddr    = 1
	phPorts   = 2
	phIdtab   = 3
	phEntries = 4
	phPost    = 5
	phDimSigs = 6
	phSigs    = 7
	hdrWords  = phSigs + 8
	// A record: the signatures it has sub-records for, then their
	// offsets (u32) by slot.
	recWords = 5
	recSubs  = 1
)

// Stage is a Table laid out in the engine's memory (c/engine.h reads
// it), shared by every endpoint stage of the same rules.
type Stage struct {
	t     *Table
	arena arena
	hdr   uint32
	refs  int
	W     uint32 // summary words
	// recs are the records made, by dimension and class key.
	recs   [numDims]map[string]uint32
	tables map[[256]uint32]uint32
	rows   map[*uint32]uint32
	// The address sides: the index of the constraints, the global id of
	// each of the stage's predicates and back.
	axi   [2]addrIndex
	gpred [2][]uint32
	local [2]map[uint32]int
	idtab uint32
	idcap uint32
	idlen uint32
	// truth is setIdent's scratch (all false between calls): a slice of
	// the side's predicates made per identity was most of a 10,000-rule
	// stage's garbage.
	truth []bool
}

// Table is what the stage holds.
func (s *Stage) Table() *Table { return s.t }

// Words is the memory the stage takes.
func (s *Stage) Words() uint32 { return s.arena.words() }

func (s *Stage) alloc(n uint32) (uint32, error) { return s.arena.alloc(n) }

// layout writes the stage, its identity table covering ids below x's
// count; the header last.
func (s *Stage) layout(mem Mem, x *idents, dir uint32, gen uint32) error {
	t := s.t
	for d := range numDims {
		s.recs[d] = map[string]uint32{}
	}
	s.tables = map[[256]uint32]uint32{}
	s.rows = map[*uint32]uint32{}
	n := uint32(len(t.entries))
	nblocks := (n + 63) / 64
	s.W = (nblocks + 63) / 64
	hdr, err := s.alloc(hdrWords)
	if err != nil {
		return err
	}
	s.hdr = hdr
	// Entries and their named-port checks.
	var post []uint64
	ents, err := s.alloc(2 * n)
	if err != nil {
		return err
	}
	for i, e := range t.entries {
		w0 := uint64(e.act) | uint64(e.slot&0xfffff)<<8 | uint64(e.next&0xfffff)<<28
		if len(e.post) > 0 {
			w0 |= 0x10 | uint64(len(post))<<48
			post = append(post, uint64(len(e.post)))
			for _, p := range e.post {
				f := uint64(0)
				if p.src {
					f |= 1
				}
				if p.negate {
					f |= 2
				}
				post = append(post, bpf.SetID(p.set), f)
			}
		}
		mem.Store(ents+2*uint32(i), w0)
		mem.Store(ents+2*uint32(i)+1, e.id)
	}
	posts, err := s.alloc(uint32(len(post)))
	if err != nil {
		return err
	}
	for i, v := range post {
		mem.Store(posts+uint32(i), v)
	}
	// The entries no dimension constrains: summaries, then every block.
	u, err := s.alloc(s.W + nblocks)
	if err != nil {
		return err
	}
	for i, e := range t.entries {
		if e.sig == 0 {
			b := uint32(i) / 64
			mem.Store(u+b/64, mem.Load(u+b/64)|1<<(b%64))
			mem.Store(u+s.W+b, mem.Load(u+s.W+b)|1<<(i%64))
		}
	}
	var l4top, sptop uint32
	if t.used&(1<<dimL4) != 0 {
		if l4top, err = s.alloc(256); err != nil {
			return err
		}
		for r := range 512 {
			v, err := s.row(mem, dimL4, t.l4.sets, t.l4.rows[r])
			if err != nil {
				return err
			}
			mem.Store32(2*l4top+uint32(r), v)
		}
	}
	if t.used&(1<<dimSport) != 0 {
		v, err := s.row(mem, dimSport, t.sport.sets, t.sport.c)
		if err != nil {
			return err
		}
		if v&tableBit == 0 {
			// The engine reads the source port's table as a table.
			var vals [256]uint32
			for i := range vals {
				vals[i] = v
			}
			if v, err = s.table(mem, vals); err != nil {
				return err
			}
		}
		sptop = v &^ tableBit
	}
	for side := range 2 {
		s.axi[side] = t.addrIndex(side)
	}
	if err := s.grow(mem, x, x.count()); err != nil {
		return err
	}
	var dimSigs uint64
	for i, sig := range t.sigs {
		v := uint32(sig)
		for d := range numDims {
			if sig&(1<<d) != 0 {
				v |= uint32(t.slotOf[d][sig]) << (4 + 4*d)
				dimSigs |= 1 << (16*d + i)
			}
		}
		mem.Store32(2*(hdr+phSigs)+uint32(i), v)
	}
	mem.Store(hdr+phDimSigs, dimSigs)
	mem.Store(hdr+phAddr, uint64(dir)|uint64(gen)<<32)
	mem.Store(hdr+phPorts, uint64(l4top)|uint64(sptop)<<32)
	mem.Store(hdr+phEntries, uint64(ents)|uint64(u)<<32)
	mem.Store(hdr+phPost, uint64(posts))
	mem.Store(hdr+phInfo, uint64(n)|uint64(s.W)<<32|uint64(len(t.sigs))<<40|uint64(t.used)<<48|engineVersion<<56)
	return nil
}

// row lays out a 16-bit value space's classes: one record, or a table by
// the high byte whose entries are records or tables by the low byte.
func (s *Stage) row(mem Mem, d int, sets [][]int32, c classes) (uint32, error) {
	if v, ok := s.rows[&c.cuts[0]]; ok {
		return v, nil
	}
	rec := func(k int) (uint32, error) { return s.record(mem, d, sets[k]) }
	if len(c.cuts) == 1 {
		v, err := rec(c.class[0])
		s.rows[&c.cuts[0]] = v
		return v, err
	}
	var his [256]uint32
	for h := range uint32(256) {
		lo, hi := h<<8, h<<8|0xff
		i := sort.Search(len(c.cuts), func(i int) bool { return c.cuts[i] > lo }) - 1
		if i+1 == len(c.cuts) || c.cuts[i+1] > hi {
			v, err := rec(c.class[i])
			if err != nil {
				return 0, err
			}
			his[h] = v
			continue
		}
		var los [256]uint32
		for l := range uint32(256) {
			for i+1 < len(c.cuts) && c.cuts[i+1] <= lo+l {
				i++
			}
			v, err := rec(c.class[i])
			if err != nil {
				return 0, err
			}
			los[l] = v
		}
		v, err := s.table(mem, los)
		if err != nil {
			return 0, err
		}
		his[h] = v
	}
	v, err := s.table(mem, his)
	s.rows[&c.cuts[0]] = v
	return v, err
}

// table writes a table of 256 u32 (shared by content).
func (s *Stage) table(mem Mem, vals [256]uint32) (uint32, error) {
	if at, ok := s.tables[vals]; ok {
		return tableBit | at, nil
	}
	at, err := s.alloc(128)
	if err != nil {
		return 0, err
	}
	for i, v := range vals {
		mem.Store32(2*at+uint32(i), v)
	}
	s.tables[vals] = at
	return tableBit | at, nil
}

// record writes the record of a class of dimension d: the entries of set
// (all of which constrain d), by signature, as sparse bitmaps. An empty
// class is record 0.
func (s *Stage) record(mem Mem, d int, set []int32) (uint32, error) {
	if len(set) == 0 {
		return 0, nil
	}
	key := setKey(set)
	if at, ok := s.recs[d][key]; ok {
		return at, nil
	}
	bySlot := map[int][]int32{}
	var sigs uint64
	for _, e := range set {
		sig := s.t.entries[e].sig
		k := s.t.slotOf[d][sig]
		bySlot[k] = append(bySlot[k], e)
		sigs |= 1 << slices.Index(s.t.sigs, sig)
	}
	rec, err := s.alloc(recWords)
	if err != nil {
		return 0, err
	}
	for k, es := range bySlot {
		sub, err := s.subRecord(mem, es)
		if err != nil {
			return 0, err
		}
		mem.Store32(2*(rec+recSubs)+uint32(k), sub)
	}
	mem.Store(rec, sigs)
	s.recs[d][key] = rec
	return rec, nil
}

// subRecord writes a sparse bitmap of entries (sorted): per summary word
// the word and the rank of its first block, then the non-empty blocks.
func (s *Stage) subRecord(mem Mem, es []int32) (uint32, error) {
	var blocks []uint32
	words := map[uint32]uint64{}
	for _, e := range es {
		b := uint32(e) / 64
		if _, ok := words[b]; !ok {
			blocks = append(blocks, b)
		}
		words[b] |= 1 << (e % 64)
	}
	slices.Sort(blocks)
	at, err := s.alloc(2*s.W + uint32(len(blocks)))
	if err != nil {
		return 0, err
	}
	rank := uint32(0)
	for w := range s.W {
		var sum uint64
		first := rank
		for _, b := range blocks {
			if b/64 == w {
				sum |= 1 << (b % 64)
				mem.Store(at+2*s.W+rank, words[b])
				rank++
			}
		}
		mem.Store(at+2*w, sum)
		mem.Store(at+2*w+1, uint64(first))
	}
	return at, nil
}

// grow extends the identity table to the ids below count: a larger table
// is a copy made before the header points at it; the entries of new ids
// are written before the length covers them.
func (s *Stage) grow(mem Mem, x *idents, count uint32) error {
	if s.t.used&(1<<dimSrc|1<<dimDst) == 0 {
		return nil
	}
	if count > s.idcap {
		capacity := max(64, count*2)
		at, err := s.alloc(capacity)
		if err != nil {
			return err
		}
		for i := range s.idlen {
			mem.Store(at+i, mem.Load(s.idtab+i))
		}
		s.idtab, s.idcap = at, capacity
		if s.hdr != 0 && s.idlen > 0 {
			mem.Store(s.hdr+phIdtab, uint64(s.idtab)|uint64(s.idlen)<<32)
		}
	}
	for id := s.idlen; id < count; id++ {
		if err := s.setIdent(mem, x, id); err != nil {
			return err
		}
	}
	s.idlen = max(s.idlen, count)
	mem.Store(s.hdr+phIdtab, uint64(s.idtab)|uint64(s.idlen)<<32)
	return nil
}

// setIdent writes identity id's entry: the records of its classes as a
// source and as a destination.
func (s *Stage) setIdent(mem Mem, x *idents, id uint32) error {
	vec := x.idVec[id]
	if vec == nil {
		mem.Store(s.idtab+id, 0)
		return nil
	}
	var recs [2]uint32
	for side := range 2 {
		d := dimSrc + side
		if s.t.used&(1<<d) == 0 {
			continue
		}
		var trues []int
		for _, g := range vec {
			if l, ok := s.local[side][g]; ok {
				trues = append(trues, l)
			}
		}
		slices.Sort(trues)
		key := make([]int32, len(trues))
		for i, l := range trues {
			key[i] = int32(l)
		}
		k := "v" + setKey(key)
		if at, ok := s.recs[d][k]; ok {
			recs[side] = at
			continue
		}
		if n := len(s.t.preds[side]); len(s.truth) < n {
			s.truth = make([]bool, n)
		}
		for _, l := range trues {
			s.truth[l] = true
		}
		sat := s.t.addrSatisfied(side, s.axi[side], trues, s.truth)
		for _, l := range trues {
			s.truth[l] = false
		}
		at, err := s.record(mem, d, sat)
		if err != nil {
			return err
		}
		s.recs[d][k] = at
		recs[side] = at
	}
	mem.Store(s.idtab+id, uint64(recs[0])|uint64(recs[1])<<32)
	return nil
}
