package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/palisade-net/palisade/felix/calc"
)

// The engine's view of a stage (c/engine.h, DESIGN.md "The policy
// engine"): its entries in Calico's order, and for each dimension of a
// packet the classes of its values with the entries each satisfies. A
// Table is pure; Stage lays one out in the engine's memory.

// Dimensions of a packet.
const (
	dimL4    = iota // family, protocol, destination port or ICMP type and code
	dimSport        // source port
	dimSrc          // source address
	dimDst          // destination address
	numDims
)

// Entry actions (PA_*).
const (
	actAllow = 0
	actDeny  = 1
	actNone  = 2
	actPass  = 3
	actLog   = 4
)

// Limits of a stage the engine takes; a larger one is compiled into
// instructions, or fails closed.
const (
	// maxSummaryWords bounds the summaries: 64 blocks of 64 entries each.
	maxSummaryWords = 16
	maxEntries      = maxSummaryWords * 64 * 64
	// maxPost bounds an entry's named-port checks (PE_MAX_POST).
	maxPost = 8
	// maxSlotsPerDim: a record holds the sub-records of at most eight
	// signatures (those containing its dimension, which number eight).
	maxSlotsPerDim = 8
)

// ErrNotEngine is returned for a stage the engine does not take.
var ErrNotEngine = errors.New("not for the policy engine")

// entry is one entry of a stage: a rule (or one alternative of it), or an
// implicit end.
type entry struct {
	act  uint8
	slot int    // description slot (Log events)
	id   uint64 // counter key
	// next is where the walk goes on after a Log or Pass.
	next int
	l4   *l4Cons
	// sport: the source port; nil for any.
	sport *ivals
	// addr: source and destination constraints; nil for any.
	addr [2]*addrCons
	post []postCheck
	sig  uint8
}

// l4Cons is an entry's constraint on family, protocol and the destination
// port or ICMP type and code.
type l4Cons struct {
	ipVersion             int
	protocol, notProtocol uint8
	hasPorts              bool
	dport                 *ivals // nil: any
	icmp, notICMP         *icmpMatch
}

type icmpMatch struct {
	typ  uint8
	code *uint8
}

// addrCons is an entry's constraint on one address, over the stage's
// address predicates of that side (indexes into Table.preds[side]): in
// one of nets (or nets empty), in none of notNets, in every one of sets,
// in none of notSets.
type addrCons struct {
	nets, notNets, sets, notSets []int
}

// postCheck is a named-port set lookup made once the other dimensions
// matched: the (address, port) of the side must (or, negated, must not)
// be a member.
type postCheck struct {
	set    string
	src    bool
	negate bool
}

// PredKey names an address predicate: an IP set ("s:" and its calc id)
// or a rule's CIDR ("c:" and the prefix).
type PredKey string

func setPred(id string) PredKey        { return PredKey("s:" + id) }
func netPred(p netip.Prefix) PredKey   { return PredKey("c:" + p.Masked().String()) }
func (k PredKey) isSet() bool          { return len(k) > 2 && k[:2] == "s:" }
func (k PredKey) setID() string        { return string(k[2:]) }
func (k PredKey) prefix() netip.Prefix { return netip.MustParsePrefix(string(k[2:])) }

// Table is a stage compiled for the engine.
type Table struct {
	Slots []Slot
	// Hash identifies the stage: the same rules give the same hash.
	Hash    string
	entries []entry
	sigs    []uint8
	// slotOf[d][sig] is the sub-record slot of signature sig in records
	// of dimension d.
	slotOf [numDims]map[uint8]int
	// l4 and sport are the port dimensions' classes.
	l4    l4Dim
	sport portDim
	// preds are each address side's predicates.
	preds [2][]PredKey
	used  uint8 // dimensions any entry constrains
}

// Entries is the number of entries.
func (t *Table) Entries() int { return len(t.entries) }

// CompileTable compiles a stage for the engine. It returns ErrNotEngine
// (wrapped) for one the engine cannot take.
func CompileTable(in Input) (*Table, error) {
	b := &tableBuilder{t: &Table{}, predIdx: [2]map[PredKey]int{{}, {}}}
	// The hash covers the input through the rules' digests (JSON of
	// the rules), which the rule ids need anyway: encoding the input a
	// second time took a tenth of a 10,000-rule stage's build.
	h := sha256.New()
	fmt.Fprintf(h, "engine %d final=%v\n", engineVersion, in.Final)
	for _, t := range in.Tiers {
		fmt.Fprintf(h, "tier %q %q\n", t.Name, t.DefaultAction)
		var passes []int
		for _, p := range t.Policies {
			owner := RulesDigest(p.Rules)
			fmt.Fprintf(h, "policy %q %s\n", p.ID.String(), owner)
			for i, r := range p.Rules {
				s := Slot{Tier: t.Name, Policy: p.ID.String(), Namespace: p.ID.Namespace, Name: p.ID.Name, Rule: i}
				passes = append(passes, b.rule(r, s, owner)...)
			}
		}
		if in.Final && t.DefaultAction != calc.Pass {
			b.end(actDeny, Slot{Tier: t.Name, Rule: -1, Index: -1, Action: "Deny", Match: "end of tier " + t.Name + ": no policy allowed or passed the packet"})
		}
		b.passTo(passes)
	}
	if in.Final {
		for _, p := range in.Profiles {
			owner := RulesDigest(p.Rules)
			fmt.Fprintf(h, "profile %q %s\n", p.Name, owner)
			var passes []int
			for i, r := range p.Rules {
				passes = append(passes, b.rule(r, Slot{Profile: p.Name, Name: p.Name, Rule: i}, owner)...)
			}
			b.passTo(passes)
		}
		b.end(actDeny, Slot{Rule: -1, Index: -1, Action: "Deny", Match: "no policy or profile allowed the packet"})
	} else {
		b.end(actNone, Slot{Rule: -1, Index: -1, Action: "None", Match: "no decision: the walk goes on"})
	}
	if b.err != nil {
		return nil, b.err
	}
	t := b.t
	if len(t.entries) > maxEntries {
		return nil, fmt.Errorf("%d entries, more than %d: %w", len(t.entries), maxEntries, ErrNotEngine)
	}
	t.signatures()
	t.l4 = buildL4(t.entries)
	t.sport = buildSport(t.entries)
	t.Hash = hex.EncodeToString(h.Sum(nil))
	return t, nil
}

// engineVersion is PE_VERSION: the layout's version.
const engineVersion = 1

type tableBuilder struct {
	t       *Table
	predIdx [2]map[PredKey]int
	err     error
}

func (b *tableBuilder) slot(s Slot, owner string) Slot {
	s.Slot = len(b.t.Slots)
	s.ID = RuleID(s, owner)
	b.t.Slots = append(b.t.Slots, s)
	return s
}

// end adds an implicit end.
func (b *tableBuilder) end(act uint8, s Slot) {
	s = b.slot(s, "")
	b.t.entries = append(b.t.entries, entry{act: act, slot: s.Slot, id: s.ID})
}

// passTo points the Pass entries at the next entry to be added.
func (b *tableBuilder) passTo(passes []int) {
	for _, i := range passes {
		b.t.entries[i].next = len(b.t.entries)
	}
}

func (b *tableBuilder) pred(side int, k PredKey) int {
	if i, ok := b.predIdx[side][k]; ok {
		return i
	}
	i := len(b.t.preds[side])
	b.predIdx[side][k] = i
	b.t.preds[side] = append(b.t.preds[side], k)
	return i
}

// portAlt is one alternative of a side's ports: ranges, or a named-port
// set.
type portAlt struct {
	ranges []calc.PortRange
	named  string
}

func alternatives(ranges []calc.PortRange, named []string) []portAlt {
	if len(ranges) == 0 && len(named) == 0 {
		return []portAlt{{}}
	}
	var alts []portAlt
	if len(ranges) > 0 {
		alts = append(alts, portAlt{ranges: ranges})
	}
	for _, n := range named {
		alts = append(alts, portAlt{named: n})
	}
	return alts
}

// rule adds a rule's entries (one per alternative of its ports); it
// returns those of a Pass, to point at the end of the tier or profile.
func (b *tableBuilder) rule(r calc.Rule, s Slot, owner string) []int {
	s.Action = string(r.Action)
	s.Match = Describe(r)
	s.Index = r.Index
	s = b.slot(s, owner)
	var act uint8
	switch r.Action {
	case calc.Allow:
		act = actAllow
	case calc.Deny:
		act = actDeny
	case calc.Pass:
		act = actPass
	case calc.Log:
		act = actLog
	default:
		b.err = fmt.Errorf("rule %d of %s%s: unknown action %q", s.Rule, s.Policy, s.Profile, r.Action)
		return nil
	}
	hasPorts := len(r.SrcPorts)+len(r.NotSrcPorts)+len(r.DstPorts)+len(r.NotDstPorts)+
		len(r.SrcNamedPortIPSets)+len(r.NotSrcNamedPortIPSets)+len(r.DstNamedPortIPSets)+len(r.NotDstNamedPortIPSets) > 0
	var addr [2]*addrCons
	for side, f := range []struct {
		nets, notNets []netip.Prefix
		sets, notSets []string
	}{{r.SrcNets, r.NotSrcNets, r.SrcIPSets, r.NotSrcIPSets}, {r.DstNets, r.NotDstNets, r.DstIPSets, r.NotDstIPSets}} {
		if len(f.nets)+len(f.notNets)+len(f.sets)+len(f.notSets) == 0 {
			continue
		}
		c := &addrCons{}
		for _, n := range f.nets {
			c.nets = append(c.nets, b.pred(side, netPred(n)))
		}
		for _, n := range f.notNets {
			c.notNets = append(c.notNets, b.pred(side, netPred(n)))
		}
		for _, id := range f.sets {
			c.sets = append(c.sets, b.pred(side, setPred(id)))
		}
		for _, id := range f.notSets {
			c.notSets = append(c.notSets, b.pred(side, setPred(id)))
		}
		addr[side] = c
	}
	var post []postCheck
	for _, id := range r.NotSrcNamedPortIPSets {
		post = append(post, postCheck{set: id, src: true, negate: true})
	}
	for _, id := range r.NotDstNamedPortIPSets {
		post = append(post, postCheck{set: id, negate: true})
	}
	first := len(b.t.entries)
	for _, sa := range alternatives(r.SrcPorts, r.SrcNamedPortIPSets) {
		for _, da := range alternatives(r.DstPorts, r.DstNamedPortIPSets) {
			e := entry{act: act, slot: s.Slot, id: s.ID, addr: addr}
			l4 := &l4Cons{ipVersion: r.IPVersion, protocol: r.Protocol, notProtocol: r.NotProtocol, hasPorts: hasPorts}
			if len(da.ranges) > 0 || len(r.NotDstPorts) > 0 {
				l4.dport = portIvals(da.ranges, r.NotDstPorts)
			}
			if r.ICMPType != nil {
				l4.icmp = &icmpMatch{*r.ICMPType, r.ICMPCode}
			}
			if r.NotICMPType != nil {
				l4.notICMP = &icmpMatch{*r.NotICMPType, r.NotICMPCode}
			}
			if *l4 != (l4Cons{}) {
				e.l4 = l4
			}
			if len(sa.ranges) > 0 || len(r.NotSrcPorts) > 0 {
				e.sport = portIvals(sa.ranges, r.NotSrcPorts)
			}
			e.post = slices.Clone(post)
			if sa.named != "" {
				e.post = append(e.post, postCheck{set: sa.named, src: true})
			}
			if da.named != "" {
				e.post = append(e.post, postCheck{set: da.named})
			}
			if len(e.post) > maxPost {
				b.err = fmt.Errorf("rule %d of %s%s: %d named-port checks, more than %d: %w", s.Rule, s.Policy, s.Profile, len(e.post), maxPost, ErrNotEngine)
			}
			b.t.entries = append(b.t.entries, e)
		}
	}
	// A Log that matched goes on after the rule's last alternative.
	for i := first; i < len(b.t.entries); i++ {
		b.t.entries[i].next = len(b.t.entries)
	}
	if act != actPass {
		return nil
	}
	var out []int
	for i := first; i < len(b.t.entries); i++ {
		out = append(out, i)
	}
	return out
}

// signatures works out each entry's signature and the sub-record slots.
func (t *Table) signatures() {
	seen := map[uint8]bool{}
	for i := range t.entries {
		e := &t.entries[i]
		var sig uint8
		if e.l4 != nil {
			sig |= 1 << dimL4
		}
		if e.sport != nil {
			sig |= 1 << dimSport
		}
		if e.addr[0] != nil {
			sig |= 1 << dimSrc
		}
		if e.addr[1] != nil {
			sig |= 1 << dimDst
		}
		e.sig = sig
		t.used |= sig
		if sig != 0 && !seen[sig] {
			seen[sig] = true
			t.sigs = append(t.sigs, sig)
		}
	}
	sort.Slice(t.sigs, func(i, j int) bool { return t.sigs[i] < t.sigs[j] })
	for d := range numDims {
		t.slotOf[d] = map[uint8]int{}
		for _, sig := range t.sigs {
			if sig&(1<<d) != 0 {
				t.slotOf[d][sig] = len(t.slotOf[d])
			}
		}
	}
}

// ivals is a set of 16-bit values: sorted, disjoint, non-adjacent closed
// intervals.
type ivals []ival

type ival struct{ lo, hi uint32 }

func fullIvals() *ivals { return &ivals{{0, 0xffff}} }

func rangesIvals(rs []calc.PortRange) ivals {
	var out ivals
	for _, r := range rs {
		out = append(out, ival{uint32(r.Min), uint32(r.Max)})
	}
	return out.norm()
}

func (v ivals) norm() ivals {
	s := slices.Clone(v)
	sort.Slice(s, func(i, j int) bool { return s[i].lo < s[j].lo })
	var out ivals
	for _, x := range s {
		if x.lo > x.hi {
			continue
		}
		if n := len(out); n > 0 && x.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

func (v ivals) complement() ivals {
	var out ivals
	next := uint32(0)
	for _, x := range v {
		if x.lo > next {
			out = append(out, ival{next, x.lo - 1})
		}
		next = x.hi + 1
	}
	if next <= 0xffff {
		out = append(out, ival{next, 0xffff})
	}
	return out
}

func (v ivals) intersect(o ivals) ivals {
	var out ivals
	i, j := 0, 0
	for i < len(v) && j < len(o) {
		lo, hi := max(v[i].lo, o[j].lo), min(v[i].hi, o[j].hi)
		if lo <= hi {
			out = append(out, ival{lo, hi})
		}
		if v[i].hi < o[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

func (v ivals) full() bool { return len(v) == 1 && v[0] == ival{0, 0xffff} }

func (v ivals) contains(x uint32) bool {
	i := sort.Search(len(v), func(i int) bool { return v[i].hi >= x })
	return i < len(v) && v[i].lo <= x
}

// portIvals: in one of ranges (any when none), in none of not.
func portIvals(ranges, not []calc.PortRange) *ivals {
	v := ivals{{0, 0xffff}}
	if len(ranges) > 0 {
		v = rangesIvals(ranges)
	}
	v = v.intersect(rangesIvals(not).complement())
	return &v
}

// icmpIvals are the (type << 8 | code) values m matches.
func icmpIvals(m *icmpMatch) ivals {
	t := uint32(m.typ) << 8
	if m.code != nil {
		return ivals{{t | uint32(*m.code), t | uint32(*m.code)}}
	}
	return ivals{{t, t | 0xff}}
}

func portProtocol(p uint8) bool { return calc.ProtocolHasPorts(p) }

func icmpRow(fam int, proto uint8) bool { return fam == 4 && proto == 1 || fam == 6 && proto == 58 }

// l4In is where an entry's L4 constraint holds in a row (family,
// protocol): values of the destination port (port protocols), of the ICMP
// type and code (ICMP of the family), or 0 (others: all or nothing).
func l4In(c *l4Cons, fam int, proto uint8) ivals {
	if c.ipVersion != 0 && c.ipVersion != fam || c.protocol != 0 && c.protocol != proto || c.notProtocol != 0 && c.notProtocol == proto {
		return nil
	}
	if c.hasPorts && !portProtocol(proto) {
		return nil
	}
	v := ivals{{0, 0xffff}}
	if c.dport != nil {
		v = v.intersect(*c.dport)
	}
	if c.icmp != nil || c.notICMP != nil {
		if !icmpRow(fam, proto) {
			return nil
		}
		if c.icmp != nil {
			v = v.intersect(icmpIvals(c.icmp))
		}
		if c.notICMP != nil {
			v = v.intersect(icmpIvals(c.notICMP).complement())
		}
	}
	return v
}

// classes are the classes of one 16-bit value space (an L4 row, or the
// source ports): classes[k] are the entries a value of class k
// satisfies; cuts[i] is the first value of piece i, class[i] its class.
type classes struct {
	cuts  []uint32
	class []int
}

// sweep classes the value space by the entries' intervals: base entries
// hold everywhere, the others where their intervals say.
func sweep(all *[][]int32, intern map[string]int, base []int32, dep map[int32]ivals) classes {
	type ev struct {
		at  uint32
		e   int32
		add bool
	}
	var evs []ev
	cutSet := map[uint32]bool{0: true}
	for e, v := range dep {
		for _, x := range v {
			evs = append(evs, ev{x.lo, e, true})
			cutSet[x.lo] = true
			if x.hi < 0xffff {
				evs = append(evs, ev{x.hi + 1, e, false})
				cutSet[x.hi+1] = true
			}
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	cuts := make([]uint32, 0, len(cutSet))
	for c := range cutSet {
		cuts = append(cuts, c)
	}
	slices.Sort(cuts)
	// An entry is active where any of its intervals is: counted, so that
	// the order of one position's events (an interval ending where the
	// next begins, or two that overlap) does not matter.
	active := map[int32]int{}
	var out classes
	k := 0
	for _, c := range cuts {
		for ; k < len(evs) && evs[k].at == c; k++ {
			if evs[k].add {
				active[evs[k].e]++
			} else if active[evs[k].e]--; active[evs[k].e] == 0 {
				delete(active, evs[k].e)
			}
		}
		set := slices.Clone(base)
		for e := range active {
			set = append(set, e)
		}
		slices.Sort(set)
		out.cuts = append(out.cuts, c)
		out.class = append(out.class, internClass(all, intern, set))
	}
	return out
}

func internClass(all *[][]int32, intern map[string]int, set []int32) int {
	key := setKey(set)
	if k, ok := intern[key]; ok {
		return k
	}
	intern[key] = len(*all)
	*all = append(*all, set)
	return len(*all) - 1
}

// setKey is a set of entries as a map key.
func setKey(set []int32) string {
	b := make([]byte, 0, 4*len(set))
	for _, e := range set {
		b = binary.LittleEndian.AppendUint32(b, uint32(e))
	}
	return string(b)
}

// at is the class of value v.
func (c classes) at(v uint32) int {
	i := sort.Search(len(c.cuts), func(i int) bool { return c.cuts[i] > v }) - 1
	return c.class[i]
}

// l4Dim: the classes of the L4 dimension, by row (family 4: 0–255,
// family 6: 256–511), each a classing of its 16-bit values.
type l4Dim struct {
	sets [][]int32
	rows [512]classes
}

func buildL4(es []entry) l4Dim {
	var d l4Dim
	intern := map[string]int{}
	internClass(&d.sets, intern, nil) // class 0: nothing
	protos := map[uint8]bool{1: true, 6: true, 17: true, 58: true, 132: true, 136: true}
	for _, e := range es {
		if e.l4 != nil {
			protos[e.l4.protocol] = true
			protos[e.l4.notProtocol] = true
		}
	}
	for fi, fam := range []int{4, 6} {
		var other *classes
		for p := range 256 {
			proto := uint8(p)
			if !protos[proto] && other != nil {
				d.rows[fi*256+p] = *other
				continue
			}
			base := []int32{}
			dep := map[int32]ivals{}
			for i, e := range es {
				if e.l4 == nil {
					continue
				}
				v := l4In(e.l4, fam, proto)
				switch {
				case len(v) == 0:
				case v.full():
					base = append(base, int32(i))
				default:
					dep[int32(i)] = v
				}
			}
			c := sweep(&d.sets, intern, base, dep)
			d.rows[fi*256+p] = c
			if !protos[proto] {
				other = &c
			}
		}
	}
	return d
}

// portDim: the classes of the source port.
type portDim struct {
	sets [][]int32
	c    classes
}

func buildSport(es []entry) portDim {
	var d portDim
	intern := map[string]int{}
	internClass(&d.sets, intern, nil)
	dep := map[int32]ivals{}
	var base []int32
	for i, e := range es {
		if e.sport == nil {
			continue
		}
		if e.sport.full() {
			base = append(base, int32(i))
		} else if len(*e.sport) > 0 {
			dep[int32(i)] = *e.sport
		}
	}
	d.c = sweep(&d.sets, intern, base, dep)
	return d
}

// addrIndex indexes a side's constraints by predicate, so that the
// entries an address satisfies are found from its true predicates.
type addrIndex struct {
	// pos are the entries naming each predicate in nets or sets; neg
	// those with neither (only exclusions), which hold unless excluded.
	pos [][]int32
	neg []int32
}

func (t *Table) addrIndex(side int) addrIndex {
	x := addrIndex{pos: make([][]int32, len(t.preds[side]))}
	for i, e := range t.entries {
		c := e.addr[side]
		if c == nil {
			continue
		}
		if len(c.nets)+len(c.sets) == 0 {
			x.neg = append(x.neg, int32(i))
			continue
		}
		for _, p := range append(slices.Clone(c.nets), c.sets...) {
			if l := x.pos[p]; len(l) == 0 || l[len(l)-1] != int32(i) {
				x.pos[p] = append(l, int32(i))
			}
		}
	}
	return x
}

// addrSatisfied are the entries whose constraint on side holds for an
// address whose true predicates of the stage are trues (truth says the
// same, indexed by predicate).
func (t *Table) addrSatisfied(side int, x addrIndex, trues []int, truth []bool) []int32 {
	cand := slices.Clone(x.neg)
	for _, p := range trues {
		cand = append(cand, x.pos[p]...)
	}
	slices.Sort(cand)
	cand = slices.Compact(cand)
	in := func(ps []int) bool {
		for _, p := range ps {
			if truth[p] {
				return true
			}
		}
		return false
	}
	out := cand[:0]
	for _, i := range cand {
		c := t.entries[i].addr[side]
		if len(c.nets) > 0 && !in(c.nets) || in(c.notNets) {
			continue
		}
		ok := true
		for _, p := range c.sets {
			if !truth[p] {
				ok = false
				break
			}
		}
		if ok && !in(c.notSets) {
			out = append(out, i)
		}
	}
	return out
}
