package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf/asm"
)

// Engine keeps the policy engine's memory (pal_pol) and pal_id6: the
// stages laid out, which slot runs which, the identities of addresses.
// It is not safe for concurrent use (felix's main loop owns it).
//
// A felix writes in a generation of its own: pages it allocates carry
// its generation, and its IPv6 identities are keyed by it. What an
// earlier felix left keeps deciding until this one has bound its own
// stages to the slots (adopting the programs in place), then DropForeign
// frees it.
type Engine struct {
	mem   Mem
	id6   ID6Map
	gen   uint16
	pg    *pages
	ids   *idents
	dir   run
	gro   arena
	byKey map[string]*Stage
	slots map[uint32]*Stage
	// limbo is freed at the next collection at least grace later.
	limbo, dying []*Stage
	lastCollect  time.Time
	foreign      bool
}

// grace is how long freed memory waits before reuse: the packets reading
// it are long done.
const grace = time.Second

// NewEngine takes over the memory: it starts a new generation and keeps
// what other generations own.
func NewEngine(mem Mem, id6 ID6Map) (*Engine, error) {
	h := mem.Load(memHeader)
	gen := uint16(1)
	if h&^0xffff == memMagic {
		gen = uint16(h) + 1
		if gen == 0 {
			gen = 1
		}
	}
	e := &Engine{mem: mem, id6: id6, gen: gen, byKey: map[string]*Stage{}, slots: map[uint32]*Stage{}}
	e.pg = newPages(mem, gen)
	e.foreign = e.pg.used() > 0
	dir, err := e.pg.alloc((1 << 16) / 2 / pageWords)
	if err != nil {
		return nil, err
	}
	e.dir = dir
	e.gro = arena{p: e.pg}
	e.ids = newIdents(dir.start(), &e.gro)
	mem.Store(memHeader, memMagic|uint64(gen))
	return e, nil
}

// Gen is the generation this engine writes.
func (e *Engine) Gen() uint32 { return uint32(e.gen) }

// Foreign reports whether an earlier felix's data is still kept.
func (e *Engine) Foreign() bool { return e.foreign }

// SetMembers, MemberDelta and RemoveSet follow a net IP set's members
// (calc's hash:net sets); Sync applies them.
func (e *Engine) SetMembers(id string, old, members []string) {
	for _, m := range old {
		e.ids.member(id, m, -1)
	}
	for _, m := range members {
		e.ids.member(id, m, 1)
	}
}

// MemberDelta adds and removes members of a net set.
func (e *Engine) MemberDelta(id string, added, removed []string) {
	for _, m := range added {
		e.ids.member(id, m, 1)
	}
	for _, m := range removed {
		e.ids.member(id, m, -1)
	}
}

// Stage returns the stage of t's rules, laid out when new, and takes a
// reference on it.
func (e *Engine) Stage(t *Table) (*Stage, error) {
	if s := e.byKey[t.Hash]; s != nil {
		s.refs++
		return s, nil
	}
	s := &Stage{t: t, arena: arena{p: e.pg}, refs: 1}
	for side := range 2 {
		s.local[side] = map[uint32]int{}
		for l, k := range t.preds[side] {
			g := e.ids.acquire(k)
			s.gpred[side] = append(s.gpred[side], g)
			s.local[side][g] = l
		}
	}
	// The partition first (the stage is bound to no slot yet), then the
	// stage, which covers every identity.
	err := e.Sync()
	if err == nil {
		err = s.layout(e.mem, e.ids, e.ids.dir, uint32(e.gen))
	}
	if err != nil {
		e.dropStage(s)
		return nil, fmt.Errorf("laying out a stage of %d entries: %w", len(t.entries), err)
	}
	e.byKey[t.Hash] = s
	return s, nil
}

// plan works out the identities of the partition's changes and gives
// the new ones to every stage.
func (e *Engine) plan() (*plan, error) {
	pl, err := e.ids.makePlan()
	if err != nil {
		return nil, err
	}
	if len(pl.newIDs) == 0 {
		return pl, nil
	}
	for _, s := range e.byKey {
		if err := s.grow(e.mem, e.ids, e.ids.count()); err != nil {
			return nil, err
		}
		for _, id := range pl.newIDs {
			if id < s.idlen {
				if err := s.setIdent(e.mem, e.ids, id); err != nil {
					return nil, err
				}
			}
		}
	}
	return pl, nil
}

func (e *Engine) commit(pl *plan) error {
	return e.ids.commit(pl, e.mem, e.id6, uint32(e.gen))
}

// Sync applies the sets' changes: the identities' tables are rewritten
// where they changed.
func (e *Engine) Sync() error {
	pl, err := e.plan()
	if err != nil {
		return err
	}
	return e.commit(pl)
}

// Release drops a reference on a stage; the last one frees it (after
// grace), and its predicates leave the partition at the next Sync.
func (e *Engine) Release(s *Stage) {
	if s == nil {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	delete(e.byKey, s.t.Hash)
	for slot, b := range e.slots {
		if b == s {
			e.Unbind(slot)
		}
	}
	e.dropStage(s)
}

func (e *Engine) dropStage(s *Stage) {
	for side := range 2 {
		for _, k := range s.t.preds[side] {
			e.ids.release(k)
		}
	}
	e.limbo = append(e.limbo, s)
}

// Bind makes a slot's program run stage s.
func (e *Engine) Bind(slot uint32, s *Stage) error {
	if slot >= slotMax {
		return fmt.Errorf("slot %d out of the engine's range", slot)
	}
	e.mem.Store32(2*memSlots+slot, s.hdr)
	e.slots[slot] = s
	return nil
}

// Unbind empties a slot (its program, if run, drops).
func (e *Engine) Unbind(slot uint32) {
	if slot < slotMax {
		e.mem.Store32(2*memSlots+slot, 0)
	}
	delete(e.slots, slot)
}

// Collect frees what was released at least grace ago.
func (e *Engine) Collect(now time.Time) {
	if now.Sub(e.lastCollect) < grace {
		return
	}
	e.lastCollect = now
	for _, s := range e.dying {
		for _, r := range s.arena.runs {
			e.pg.free(r)
		}
	}
	e.dying, e.limbo = e.limbo, nil
	e.ids.settle()
}

// DropForeign frees what other generations left: slots this engine did
// not bind are emptied, their pages and IPv6 identities go.
func (e *Engine) DropForeign(sweep6 func(keep uint32) error) error {
	if !e.foreign {
		return nil
	}
	for slot := range uint32(slotMax) {
		if e.slots[slot] == nil && e.mem.Load32(2*memSlots+slot) != 0 {
			e.mem.Store32(2*memSlots+slot, 0)
		}
	}
	e.pg.freeForeign()
	var err error
	if sweep6 != nil {
		err = sweep6(uint32(e.gen))
	}
	if err == nil {
		e.foreign = false
	}
	return err
}

// Usage is the memory in use, in words, and the identities.
func (e *Engine) Usage() (words, identities int) {
	return e.pg.used() * pageWords, int(e.ids.count())
}

// Stub is the program of an engine stage: it carries the stage's
// description, and holds its slot. The entry programs run the engine in
// its place while the slot has the stage's data (Bind); without, the
// stub runs and drops (fail closed).
func Stub() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Imm(asm.R0, 2).WithSymbol("stub"),
		asm.Return(),
	}
}

// ErrEngineFull is returned when the engine's memory has no room.
var ErrEngineFull = errors.New("policy engine memory full")
