package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// engineWorld keeps a world's stage in an engine: its sets' members
// given to the engine, its table laid out and bound to a slot.
type engineWorld struct {
	w     *diffWorld
	t     *Table
	s     *Stage
	slot  uint32
	named map[uint64]string
}

func (ew *engineWorld) ports(set uint64, addr netip.Addr, proto uint8, port uint16) bool {
	return ew.w.InSet(ew.named[set], addr, proto, port)
}

func netMembers(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func (ew *engineWorld) load(t testing.TB, e *Engine, slot uint32) {
	t.Helper()
	for id, ps := range ew.w.nets {
		e.SetMembers(id, nil, netMembers(ps))
	}
	tb, err := CompileTable(ew.w.input())
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Stage(tb)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Bind(slot, s); err != nil {
		t.Fatal(err)
	}
	ew.t, ew.s, ew.slot = tb, s, slot
	ew.named = map[uint64]string{}
	for id := range ew.w.named {
		ew.named[bpf.SetID(id)] = id
	}
}

func (ew *engineWorld) unload(e *Engine) {
	e.Release(ew.s)
	for id, ps := range ew.w.nets {
		e.SetMembers(id, netMembers(ps), nil)
	}
}

// check runs a packet through the interpreter and compares it with
// explain: the verdict and what decided.
func (ew *engineWorld) check(it *interp, p packet) error {
	cp := calc.Packet{Src: netip.MustParseAddr(p.src), Dst: netip.MustParseAddr(p.dst), Protocol: p.proto,
		SrcPort: p.sport, DstPort: p.dport, ICMPType: p.icmpType, ICMPCode: p.icmpCode}
	ip := ipkt{src: cp.Src, dst: cp.Dst, proto: p.proto, sport: p.sport, dport: p.dport, icmpType: p.icmpType, icmpCode: p.icmpCode}
	if cp.IsICMP() {
		cp.SrcPort, cp.DstPort = 0, 0
		ip.dport = 0
	}
	pol := calc.Policies{Policy: func(id calc.PolicyID) *calc.Policy { return ew.w.policies[id] },
		Profile: func(n string) *calc.Profile { return ew.w.profiles[n] }, Sets: ew.w}
	want := calc.EvalChain(ew.w.ep.Tiers, ew.w.ep.Profiles, false, cp, pol, true)
	it.ports = ew.ports
	got := it.run(ew.slot, ip)
	if got.fail {
		return fmt.Errorf("%s: the engine failed", p)
	}
	i := slices.IndexFunc(ew.t.Slots, func(s Slot) bool { return s.ID == got.id })
	if i < 0 {
		return fmt.Errorf("%s: decided by rule id %#x, no slot", p, got.id)
	}
	s := ew.t.Slots[i]
	gotAllow := got.verdict == actAllow
	if gotAllow != (want.Verdict == calc.VerdictAllow) {
		return fmt.Errorf("%s (icmp %d/%d): engine %v by %+v, explain %v by %+v", p, p.icmpType, p.icmpCode, gotAllow, s, want.Verdict, want.Decider)
	}
	d := want.Decider
	switch {
	case d == nil:
		return fmt.Errorf("%s: explain has no decider", p)
	case d.What == "rule":
		r := d.Rule
		ok := s.Index == r.Index && (r.Kind == calc.KindNameProfile && s.Profile == r.Name ||
			r.Kind != calc.KindNameProfile && s.Tier == r.Tier && s.Name == r.Name && s.Namespace == r.Namespace)
		if !ok {
			return fmt.Errorf("%s: engine decided by %+v, explain by %+v", p, s, *r)
		}
	case d.What == "end-of-tier":
		if s.Rule != -1 || s.Tier != d.Tier {
			return fmt.Errorf("%s: engine decided by %+v, explain by the end of tier %s", p, s, d.Tier)
		}
	default:
		if s.Rule != -1 || s.Tier != "" {
			return fmt.Errorf("%s: engine decided by %+v, explain by %s", p, s, d.What)
		}
	}
	return nil
}

// changeMembers moves one of the world's sets' members: an address or a
// net in or out.
func (ew *engineWorld) changeMembers(r *rand.Rand, e *Engine) {
	var ids []string
	for id := range ew.w.nets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	id := pick(r, ids)
	ms := ew.w.nets[id]
	if len(ms) > 0 && r.IntN(2) == 0 {
		i := r.IntN(len(ms))
		gone := ms[i]
		ew.w.nets[id] = slices.Delete(slices.Clone(ms), i, i+1)
		if !slices.Contains(ew.w.nets[id], gone) {
			e.MemberDelta(id, nil, []string{gone.String()})
		}
		return
	}
	p := mixPrefix(r)
	if r.IntN(2) == 0 {
		p = netip.MustParsePrefix(pick(r, diffNets))
	}
	if !slices.Contains(ms, p) {
		e.MemberDelta(id, []string{p.String()}, nil)
	}
	ew.w.nets[id] = append(slices.Clone(ms), p)
}

// TestEngineLayout checks the engine's layout with the interpreter
// against explain: random stages (as the differential test's) and
// random packets, with set members changing between packets, several
// stages in one engine, stages released and others laid out in their
// memory.
func TestEngineLayout(t *testing.T) {
	mem := make(SliceMem, Words)
	id6 := newFakeID6()
	e, err := NewEngine(mem, id6)
	if err != nil {
		t.Fatal(err)
	}
	it := &interp{mem: mem, id6: id6}
	r := rand.New(rand.NewPCG(28, 7))
	var live []*engineWorld
	cases := 0
	start := time.Now()
	for round := range 300 {
		var w *diffWorld
		if round%50 == 49 {
			w = randomMixWorld(r, 300)
		} else {
			w = randomWorld(r)
		}
		// The sets of each world are its own (the same names would be
		// the same sets).
		w = renameWorld(w, round)
		ew := &engineWorld{w: w}
		ew.load(t, e, uint32(bpf.FirstPolicySlot+round))
		live = append(live, ew)
		for i := range 60 {
			if i%10 == 9 {
				x := pick(r, live)
				x.changeMembers(r, e)
				if err := e.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			x := pick(r, live)
			p := randomPacket(r)
			cases++
			if err := x.check(it, p); err != nil {
				t.Fatalf("round %d: %v\n%s", round, err, describeInput(x.w.input()))
			}
		}
		if len(live) > 8 {
			i := r.IntN(len(live))
			live[i].unload(e)
			live = slices.Delete(live, i, i+1)
			if err := e.Sync(); err != nil {
				t.Fatal(err)
			}
			e.Collect(time.Now().Add(time.Duration(round) * 2 * grace))
		}
	}
	words, ids := e.Usage()
	t.Logf("%d cases in %v; %d words, %d identities in use", cases, time.Since(start).Round(time.Millisecond), words, ids)
}

// renameWorld gives a world's sets a suffix of their own.
func renameWorld(w *diffWorld, n int) *diffWorld {
	ren := func(id string) string { return fmt.Sprintf("%s#%d", id, n) }
	out := *w
	out.nets, out.named = map[string][]netip.Prefix{}, map[string][]string{}
	for id, ps := range w.nets {
		out.nets[ren(id)] = ps
	}
	for id, ms := range w.named {
		out.named[ren(id)] = ms
	}
	in := renameSets(w.input(), n)
	out.policies = map[calc.PolicyID]*calc.Policy{}
	for _, t := range in.Tiers {
		for _, p := range t.Policies {
			old := w.policies[p.ID]
			np := *old
			np.Outbound = p.Rules
			out.policies[p.ID] = &np
		}
	}
	out.profiles = map[string]*calc.Profile{}
	for _, p := range in.Profiles {
		np := *w.profiles[p.Name]
		np.Outbound = p.Rules
		out.profiles[p.Name] = &np
	}
	return &out
}

var _ = strings.Contains

// TestEngineRestart: a restarted felix's engine starts a new generation
// over the same memory. The old generation's stage keeps deciding until
// the new one binds its own to the slot; DropForeign then frees the old
// pages and pal_id6 entries, and the new stage decides alone.
func TestEngineRestart(t *testing.T) {
	mem := make(SliceMem, Words)
	id6 := newFakeID6()
	r := rand.New(rand.NewPCG(28, 9))
	slot := uint32(bpf.FirstPolicySlot)
	checkAll := func(ew *engineWorld, what string) {
		t.Helper()
		it := &interp{mem: mem, id6: id6}
		for range 500 {
			if err := ew.check(it, randomPacket(r)); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	e1, err := NewEngine(mem, id6)
	if err != nil {
		t.Fatal(err)
	}
	w := randomMixWorld(r, 300)
	old := &engineWorld{w: w}
	old.load(t, e1, slot)
	checkAll(old, "first felix")
	oldWords, _ := e1.Usage()

	e2, err := NewEngine(mem, id6)
	if err != nil {
		t.Fatal(err)
	}
	if !e2.Foreign() || e2.Gen() == e1.Gen() {
		t.Fatalf("second engine: foreign %v, generation %d after %d", e2.Foreign(), e2.Gen(), e1.Gen())
	}
	checkAll(old, "restarted, the old stage still bound")
	cur := &engineWorld{w: w}
	cur.load(t, e2, slot)
	checkAll(cur, "restarted, its own stage bound")
	bothWords, _ := e2.Usage()
	if err := e2.DropForeign(func(keep uint32) error {
		for g := range id6.m {
			if g != keep {
				delete(id6.m, g)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if e2.Foreign() || len(id6.m) > 1 {
		t.Fatalf("after DropForeign: foreign %v, %d generations in pal_id6", e2.Foreign(), len(id6.m))
	}
	checkAll(cur, "after the old generation was dropped")
	// Scribble over every page free now (the old generation's
	// included): the new stage must not read them.
	if words, _ := e2.Usage(); words != bothWords-oldWords {
		t.Fatalf("%d words in use after DropForeign; %d before, the old generation's %d", words, bothWords, oldWords)
	}
	scribbled := 0
	for pg := e2.pg.first; pg < uint32(len(e2.pg.owner)); pg++ {
		if e2.pg.owner[pg] == 0 {
			scribbled++
			for i := pg * pageWords; i < (pg+1)*pageWords; i++ {
				mem[i] = ^uint64(0)
			}
		}
	}
	if scribbled == 0 {
		t.Fatal("no free page after DropForeign")
	}
	checkAll(cur, "the freed pages scribbled over")
}
