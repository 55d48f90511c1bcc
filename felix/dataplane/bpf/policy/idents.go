package policy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// Identities: the engine classes an address by the address predicates
// (IP sets, rule CIDRs) of every stage that contain it. The predicates'
// prefixes partition each family's space; each region's set of
// predicates (its vector) is interned as an identity, which pods of one
// label set share. IPv4 addresses find theirs in a DIR-16-8-8 table (a
// /16 entry is an identity or points at 256 /24 entries, and those at 256
// /32 entries), IPv6 ones in pal_id6 (the longest stored prefix holding
// the address has its identity). Each stage maps identities to its own
// classes (Stage), so a member added or removed rewrites only the table
// entries of its prefix, and a new identity only one entry per stage.

// ID6Map is pal_id6: IPv6 prefix → identity, by generation.
type ID6Map interface {
	Put(p netip.Prefix, gen uint32, id uint32) error
	Delete(p netip.Prefix, gen uint32) error
}

type pred struct {
	key  PredKey
	id   uint32
	refs int
}

// idents keeps the predicates, the partition and the identities, and
// plans the writes of the IPv4 table and pal_id6.
type idents struct {
	preds map[PredKey]*pred
	byID  []*pred
	// freePreds are ids of byID free for reuse.
	freePreds []uint32
	// sets are the members of every net set, as prefixes (with how many
	// members give each).
	sets map[string]map[netip.Prefix]int
	// v4 and v6: each stored prefix and the predicates having it.
	v4, v6 map[netip.Prefix]map[uint32]int
	// below counts, for each IPv4 prefix shorter than /32, the stored
	// prefixes strictly inside it.
	below map[netip.Prefix]int
	// dirty prefixes, to plan.
	dirty4, dirty6 map[netip.Prefix]bool

	vecs   map[string]uint32 // vector key → identity
	idVec  [][]uint32        // identity → its predicates (sorted)
	idRefs []int
	// freeIDs can be reused; limboIDs wait for the programs to stop
	// reading them.
	freeIDs, limboIDs []uint32

	// The IPv4 table as written: tbl16 at dir (word offset), groups of
	// 256 u32 (128 words) by the /16 or /24 cell they detail.
	dir    uint32
	tbl16  []uint32
	groups map[netip.Prefix]*group
	gfree  []uint32 // free group offsets
	glimbo []uint32
	garena *arena
	// v6ent are pal_id6's entries as written.
	v6ent map[netip.Prefix]uint32
}

type group struct {
	at   uint32
	vals [256]uint32
}

const groupWords = 128

func newIdents(dir uint32, garena *arena) *idents {
	x := &idents{preds: map[PredKey]*pred{}, sets: map[string]map[netip.Prefix]int{},
		v4: map[netip.Prefix]map[uint32]int{}, v6: map[netip.Prefix]map[uint32]int{},
		below: map[netip.Prefix]int{}, dirty4: map[netip.Prefix]bool{}, dirty6: map[netip.Prefix]bool{},
		vecs: map[string]uint32{}, dir: dir, tbl16: make([]uint32, 1<<16),
		groups: map[netip.Prefix]*group{}, garena: garena, v6ent: map[netip.Prefix]uint32{}}
	x.vecs[""] = 0
	x.idVec = [][]uint32{{}}
	x.idRefs = []int{1 << 30} // identity 0, no predicate, always
	return x
}

// count is the number of identities in use (the stages' tables cover
// ids below it).
func (x *idents) count() uint32 { return uint32(len(x.idVec)) }

// acquire takes a reference on a predicate, adding its prefixes to the
// partition when new.
func (x *idents) acquire(k PredKey) uint32 {
	if p := x.preds[k]; p != nil {
		p.refs++
		return p.id
	}
	p := &pred{key: k, refs: 1}
	if n := len(x.freePreds); n > 0 {
		p.id = x.freePreds[n-1]
		x.freePreds = x.freePreds[:n-1]
		x.byID[p.id] = p
	} else {
		p.id = uint32(len(x.byID))
		x.byID = append(x.byID, p)
	}
	x.preds[k] = p
	for _, pfx := range x.prefixesOf(k) {
		x.addPrefix(pfx, p.id, 1)
	}
	return p.id
}

func (x *idents) release(k PredKey) {
	p := x.preds[k]
	if p == nil {
		return
	}
	if p.refs--; p.refs > 0 {
		return
	}
	for _, pfx := range x.prefixesOf(k) {
		x.addPrefix(pfx, p.id, -1)
	}
	delete(x.preds, k)
	x.byID[p.id] = nil
	x.freePreds = append(x.freePreds, p.id)
}

func (x *idents) prefixesOf(k PredKey) []netip.Prefix {
	if !k.isSet() {
		return []netip.Prefix{k.prefix()}
	}
	var out []netip.Prefix
	for pfx, n := range x.sets[k.setID()] {
		if n > 0 {
			out = append(out, pfx)
		}
	}
	return out
}

// memberPrefix is a net set's member as a prefix.
func memberPrefix(m string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(m); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(m)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("IP set member %q is not an address or CIDR", m)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// member adds (n 1) or removes (n -1) a member of a net set.
func (x *idents) member(set string, m string, n int) {
	pfx, err := memberPrefix(m)
	if err != nil {
		return // setMaps warns; the member matches nothing
	}
	ms := x.sets[set]
	if ms == nil {
		ms = map[netip.Prefix]int{}
		x.sets[set] = ms
	}
	before := ms[pfx]
	ms[pfx] = before + n
	if ms[pfx] <= 0 {
		delete(ms, pfx)
	}
	if len(ms) == 0 {
		delete(x.sets, set)
	}
	if p := x.preds[setPred(set)]; p != nil && (before > 0) != (before+n > 0) {
		x.addPrefix(pfx, p.id, n)
	}
}

func (x *idents) addPrefix(pfx netip.Prefix, id uint32, n int) {
	tbl, dirty := x.v4, x.dirty4
	if pfx.Addr().Is6() {
		tbl, dirty = x.v6, x.dirty6
	}
	ps := tbl[pfx]
	if ps == nil {
		ps = map[uint32]int{}
		tbl[pfx] = ps
		x.inside(pfx, 1)
	}
	ps[id] += n
	if ps[id] <= 0 {
		delete(ps, id)
	}
	if len(ps) == 0 {
		delete(tbl, pfx)
		x.inside(pfx, -1)
	}
	dirty[pfx] = true
}

// inside counts a stored IPv4 prefix in every prefix holding it.
func (x *idents) inside(pfx netip.Prefix, n int) {
	if !pfx.Addr().Is4() {
		return
	}
	for bits := range pfx.Bits() {
		up := netip.PrefixFrom(pfx.Addr(), bits).Masked()
		if x.below[up] += n; x.below[up] <= 0 {
			delete(x.below, up)
		}
	}
}

func v4u(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func vecKey(v []uint32) string {
	b := make([]byte, 0, 4*len(v))
	for _, p := range v {
		b = binary.LittleEndian.AppendUint32(b, p)
	}
	return string(b)
}

// plan is the writes a sync makes: new identities to give the stages
// first, then the table's words in order, then what to free.
type plan struct {
	newIDs []uint32
	w32    []write32
	put6   map[netip.Prefix]uint32
	del6   []netip.Prefix
	// unref are identities that lost a reference.
	unref  []uint32
	groups []uint32
}

type write32 struct{ at, v uint32 }

// ident interns a vector and takes a reference on its identity.
func (x *idents) ident(v []uint32, pl *plan) uint32 {
	k := vecKey(v)
	if id, ok := x.vecs[k]; ok {
		x.idRefs[id]++
		return id
	}
	var id uint32
	if n := len(x.freeIDs); n > 0 {
		id = x.freeIDs[n-1]
		x.freeIDs = x.freeIDs[:n-1]
		x.idVec[id] = slices.Clone(v)
		x.idRefs[id] = 1
	} else {
		id = uint32(len(x.idVec))
		x.idVec = append(x.idVec, slices.Clone(v))
		x.idRefs = append(x.idRefs, 1)
	}
	x.vecs[k] = id
	pl.newIDs = append(pl.newIDs, id)
	return id
}

// preds4 adds to v the predicates of stored prefix p.
func (x *idents) preds4(v []uint32, p netip.Prefix) []uint32 {
	for id := range x.v4[p] {
		v = append(v, id)
	}
	return v
}

// above is the vector of the stored prefixes strictly holding p.
func (x *idents) above(p netip.Prefix) []uint32 {
	var v []uint32
	for bits := range p.Bits() {
		v = x.preds4(v, netip.PrefixFrom(p.Addr(), bits).Masked())
	}
	return sortedVec(v)
}

func sortedVec(v []uint32) []uint32 {
	v = slices.Clone(v)
	slices.Sort(v)
	return slices.Compact(v)
}

// cell writes a table entry (u32 index at) and moves its identity
// reference.
func (x *idents) cell(pl *plan, at uint32, old *uint32, v uint32) {
	if old != nil && *old == v {
		if v&tableBit == 0 {
			x.idRefs[v]-- // ident's reference: the cell holds one already
		}
		return
	}
	if old != nil {
		if *old&tableBit == 0 {
			pl.unref = append(pl.unref, *old)
		}
		*old = v
	}
	pl.w32 = append(pl.w32, write32{at, v})
}

const tableBit = 0x80000000

// level is a table of the IPv4 DIR: its cells are /bits prefixes,
// indexed by the address bits below the parent's; at is its u32 index,
// vals its cells as written.
type level struct {
	bits int
	at   uint32
	vals []uint32
}

func (l level) index(a uint32) uint32 { return (a >> (32 - l.bits)) & uint32(len(l.vals)-1) }

func (x *idents) top() level { return level{16, 2 * x.dir, x.tbl16} }

// makePlan works out the writes of the dirty prefixes: the cells of the
// smallest region of the table each one changes, shorter prefixes first.
func (x *idents) makePlan() (*plan, error) {
	pl := &plan{put6: map[netip.Prefix]uint32{}}
	dirty := make([]netip.Prefix, 0, len(x.dirty4))
	for p := range x.dirty4 {
		dirty = append(dirty, p)
	}
	clear(x.dirty4)
	slices.SortFunc(dirty, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	done := map[netip.Prefix]bool{}
	covered := func(p netip.Prefix) bool {
		for bits := 0; bits <= p.Bits(); bits++ {
			if done[netip.PrefixFrom(p.Addr(), bits).Masked()] {
				return true
			}
		}
		return false
	}
	for _, q := range dirty {
		if covered(q) {
			continue
		}
		r, l := x.region(q)
		done[r] = true
		if err := x.redo(pl, r, x.above(r), l); err != nil {
			return nil, err
		}
	}
	x.plan6(pl)
	return pl, nil
}

// region is the smallest region of the table (and its level) whose
// cells a change of q rewrites: q itself within the level holding it,
// or a whole cell whose group comes or goes.
func (x *idents) region(q netip.Prefix) (netip.Prefix, level) {
	l := x.top()
	for {
		if q.Bits() <= l.bits {
			return q, l
		}
		cell := netip.PrefixFrom(q.Addr(), l.bits).Masked()
		g := x.groups[cell]
		if g == nil || x.below[cell] == 0 {
			return cell, l
		}
		l = level{l.bits + 8, 2 * g.at, g.vals[:]}
	}
}

// redo rewrites the cells of level l inside region r (no longer than the
// cells); v holds the predicates of the stored prefixes strictly holding
// r.
func (x *idents) redo(pl *plan, r netip.Prefix, v []uint32, l level) error {
	v = sortedVec(x.preds4(slices.Clone(v), r))
	a := v4u(r.Addr())
	if r.Bits() == l.bits {
		at := l.index(a)
		g := x.groups[r]
		if l.bits == 32 || x.below[r] == 0 {
			x.cell(pl, l.at+at, &l.vals[at], x.ident(v, pl))
			if g != nil {
				x.dropGroup(pl, r, g)
			}
			return nil
		}
		if g == nil {
			var err error
			if g, err = x.newGroup(); err != nil {
				return err
			}
			x.groups[r] = g
		}
		// The cell's prefix is r: its predicates are in v already.
		sub := level{l.bits + 8, 2 * g.at, g.vals[:]}
		for _, half := range halves(r) {
			if err := x.redo(pl, half, v, sub); err != nil {
				return err
			}
		}
		x.cell(pl, l.at+at, &l.vals[at], tableBit|g.at)
		return nil
	}
	if x.below[r] == 0 {
		// Nothing inside: every cell is v's identity, without groups.
		id := x.ident(v, pl)
		n := uint32(1) << (l.bits - r.Bits())
		first := l.index(a)
		for i := range n {
			x.idRefs[id]++
			x.cell(pl, l.at+first+i, &l.vals[first+i], id)
		}
		x.idRefs[id]--
		for c, g := range x.groups {
			if c.Bits() == l.bits && r.Contains(c.Addr()) {
				x.dropGroup(pl, c, g)
			}
		}
		return nil
	}
	for _, half := range halves(r) {
		if err := x.redo(pl, half, v, l); err != nil {
			return err
		}
	}
	return nil
}

func halves(p netip.Prefix) [2]netip.Prefix {
	a := v4u(p.Addr()) | 1<<(31-p.Bits())
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a)
	return [2]netip.Prefix{netip.PrefixFrom(p.Addr(), p.Bits()+1), netip.PrefixFrom(netip.AddrFrom4(b), p.Bits()+1)}
}

// newGroup is a group whose entries count as not yet written: the first
// writes of its cells (before its cell points at it) are changes.
func (x *idents) newGroup() (*group, error) {
	g := &group{}
	if n := len(x.gfree); n > 0 {
		g.at = x.gfree[n-1]
		x.gfree = x.gfree[:n-1]
	} else {
		at, err := x.garena.alloc(groupWords)
		if err != nil {
			return nil, err
		}
		g.at = at
	}
	for i := range g.vals {
		g.vals[i] = tableBit | 0x7fffffff
	}
	return g, nil
}

// dropGroup releases a group's identities and its own groups; it is
// freed once the programs stopped reading it.
func (x *idents) dropGroup(pl *plan, cell netip.Prefix, g *group) {
	for i, v := range g.vals {
		if v&tableBit == 0 {
			pl.unref = append(pl.unref, v)
		} else if cell.Bits() == 16 {
			sub := netip.PrefixFrom(netip.AddrFrom4([4]byte{cell.Addr().As4()[0], cell.Addr().As4()[1], byte(i), 0}), 24)
			if sg := x.groups[sub]; sg != nil {
				x.dropGroup(pl, sub, sg)
			}
		}
	}
	pl.groups = append(pl.groups, g.at)
	delete(x.groups, cell)
}

// plan6 works out pal_id6's entries of the dirty IPv6 prefixes: each
// stored prefix inside a dirty one gets the identity of its vector.
func (x *idents) plan6(pl *plan) {
	if len(x.dirty6) == 0 {
		return
	}
	redo := map[netip.Prefix]bool{}
	for d := range x.dirty6 {
		redo[d] = true
		for q := range x.v6 {
			if q.Bits() > d.Bits() && d.Contains(q.Addr()) {
				redo[q] = true
			}
		}
	}
	clear(x.dirty6)
	for q := range redo {
		old, had := x.v6ent[q]
		if x.v6[q] == nil {
			if had {
				pl.del6 = append(pl.del6, q)
				pl.unref = append(pl.unref, old)
				delete(x.v6ent, q)
			}
			continue
		}
		var v []uint32
		for bits := 0; bits <= q.Bits(); bits++ {
			if ps := x.v6[netip.PrefixFrom(q.Addr(), bits).Masked()]; ps != nil {
				for id := range ps {
					v = append(v, id)
				}
			}
		}
		id := x.ident(sortedVec(v), pl)
		if had && old == id {
			x.idRefs[id]--
			continue
		}
		if had {
			pl.unref = append(pl.unref, old)
		}
		x.v6ent[q] = id
		pl.put6[q] = id
	}
}

// commit writes the plan (the stages hold the new identities by now) and
// releases what it replaced: identities without references and groups
// go to limbo.
func (x *idents) commit(pl *plan, mem Mem, id6 ID6Map, gen uint32) error {
	for _, w := range pl.w32 {
		mem.Store32(w.at, w.v)
	}
	var errs []error
	for q, id := range pl.put6 {
		if err := id6.Put(q, gen, id); err != nil {
			errs = append(errs, fmt.Errorf("pal_id6 %s: %w", q, err))
		}
	}
	for _, q := range pl.del6 {
		if err := id6.Delete(q, gen); err != nil {
			errs = append(errs, fmt.Errorf("pal_id6 %s: %w", q, err))
		}
	}
	for _, id := range pl.unref {
		if x.idRefs[id]--; x.idRefs[id] == 0 {
			delete(x.vecs, vecKey(x.idVec[id]))
			x.idVec[id] = nil
			x.limboIDs = append(x.limboIDs, id)
		}
	}
	x.glimbo = append(x.glimbo, pl.groups...)
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// settle makes what went to limbo before reusable (the programs reading
// it are done).
func (x *idents) settle() {
	x.freeIDs = append(x.freeIDs, x.limboIDs...)
	x.limboIDs = nil
	x.gfree = append(x.gfree, x.glimbo...)
	x.glimbo = nil
}
