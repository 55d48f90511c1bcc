package bpf

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
	"github.com/palisade-net/palisade/felix/metrics"
)

// program is a loaded policy program in its slot of pal_progs, shared by
// every endpoint stage whose rules compile to the same instructions, or
// (desc.Engine) the stub of a policy engine stage bound to its slot.
type program struct {
	hash string
	prog *ebpf.Program
	slot uint32
	refs int
	desc policy.Description
	// stage is the engine stage bound to the slot; nil for a compiled
	// program, or for a stub a previous felix left that no stage of
	// this one took yet (the previous generation's data decides).
	stage *policy.Stage
	// idle is when the last reference went.
	idle time.Time
}

// engineKey is the byHash key of an engine stage's stub: apart from the
// compiled programs'.
func engineKey(hash string) string { return "e" + hash }

// programs loads policy programs into slots, finds them by hash, and
// adopts those a previous felix left (read back through the slots the
// interfaces' entries name).
type programs struct {
	objs   *palbpf.Objects
	log    *log.Entry
	byHash map[string]*program
	bySlot map[uint32]*program
	free   []uint32
	next   uint32
	// compiled caches Compile by the identity of its inputs (the calc's
	// values are new pointers whenever they change); an entry holds the
	// values, so their addresses are not reused while it exists.
	compiled map[string]*compiledEntry
	round    uint64
	// drop is loaded in a slot for a stage that cannot be compiled.
	dropSlot uint32
	// loads counts programs loaded (tests, logs).
	loads int
	// metrics counts loads and load failures (nil: none).
	metrics *metrics.Felix
	// eng is the policy engine over pal_pol (nil: every stage is
	// compiled); useEngine says whether new stages go to it (the kernel
	// has bpf_loop, featureDetectOverride does not say BPFLoop=false,
	// and it has not failed).
	eng       *policy.Engine
	mem       *palbpf.PolicyMemory
	useEngine bool
	// engineBroken: the engine failed to follow the sets; no stage goes
	// to it until felix restarts.
	engineBroken bool
	// onSlot learns the description of each program put in a slot, and
	// of each slot emptied (nil): the Log reader's (nil: none).
	onSlot func(slot uint32, d *policy.Description)
	// tables caches CompileTable as compiled caches Compile.
	tables map[string]*compiledEntry
}

type compiledEntry struct {
	prog *policy.Program
	// table (or err, ErrNotEngine) is CompileTable's.
	table *policy.Table
	err   error
	// round is the last round of applies that took it.
	round uint64
	hold  []any
}

// hash is the byHash key of the entry's program.
func (e *compiledEntry) hash() string {
	switch {
	case e.prog != nil:
		return e.prog.Hash
	case e.table != nil:
		return engineKey(e.table.Hash)
	}
	return ""
}

// idleKeep is how long an unused program stays loaded: an endpoint whose
// policy flips back and forth does not load it again each time.
const idleKeep = 30 * time.Second

func newPrograms(objs *palbpf.Objects, logger *log.Entry) *programs {
	return &programs{objs: objs, log: logger, byHash: map[string]*program{}, bySlot: map[uint32]*program{},
		next: palbpf.FirstPolicySlot, compiled: map[string]*compiledEntry{}, tables: map[string]*compiledEntry{}}
}

// startEngine takes over pal_pol: a new generation, the sets' members
// mirrored. Without it every stage is compiled.
func (ps *programs) startEngine(sets *setMaps) {
	if !ps.objs.Engine {
		ps.log.Info("No policy engine in the programs loaded (no bpf_loop): every policy stage is compiled into instructions")
		return
	}
	mem, err := ps.objs.MapPolicyMemory()
	if err != nil {
		ps.log.WithError(err).Warn("No policy engine: every policy stage is compiled into instructions")
		return
	}
	eng, err := policy.NewEngine(mem, palbpf.ID6{M: ps.objs.Maps[palbpf.MapID6]})
	if err != nil {
		mem.Close()
		ps.log.WithError(err).Warn("No policy engine: every policy stage is compiled into instructions")
		return
	}
	ps.eng, ps.mem = eng, mem
	sets.attachEngine(eng)
	ps.log.WithFields(log.Fields{"generation": eng.Gen(), "previous": eng.Foreign()}).Info("Policy engine started")
}

func (ps *programs) noteSlot(slot uint32, d *policy.Description) {
	if ps.onSlot != nil {
		ps.onSlot(slot, d)
	}
}

// engineFailed stops laying stages out after the engine failed to follow
// the sets: its stages are unbound (their stubs drop: fail closed) until
// the caller's stages are compiled again.
func (ps *programs) engineFailed(err error) {
	ps.log.WithError(err).Error("The policy engine failed: its stages drop until they are compiled into instructions")
	ps.useEngine, ps.engineBroken = false, true
	for _, p := range ps.bySlot {
		if p.desc.Engine {
			ps.eng.Unbind(p.slot)
		}
	}
}

// dropForeign frees what a previous felix left in the engine, once this
// one's stages are bound and the interfaces name them.
func (ps *programs) dropForeign() error {
	if ps.eng == nil || !ps.eng.Foreign() {
		return nil
	}
	before, _ := ps.eng.Usage()
	if err := ps.eng.DropForeign(palbpf.ID6{M: ps.objs.Maps[palbpf.MapID6]}.Sweep); err != nil {
		return fmt.Errorf("freeing the previous felix's policy engine data: %w", err)
	}
	after, _ := ps.eng.Usage()
	ps.log.WithFields(log.Fields{"generation": ps.eng.Gen(), "freedWords": before - after}).Info("Policy engine: the previous felix's stages freed")
	return nil
}

func (ps *programs) close() {
	for _, p := range ps.byHash {
		p.prog.Close()
	}
	if ps.mem != nil {
		ps.mem.Close()
	}
}

// adopt takes over the programs in the given slots (those the kernel's
// interface entries name); other slots are cleared.
func (ps *programs) adopt(used map[uint32]bool) {
	progs := ps.objs.Maps[palbpf.MapProgs]
	maxSlot := uint32(palbpf.FirstPolicySlot)
	for slot := range used {
		if slot < palbpf.FirstPolicySlot {
			continue
		}
		var id uint32
		if err := progs.Lookup(slot, &id); err != nil {
			continue
		}
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			continue
		}
		info, err := palbpf.ProgramInfo(p)
		var desc policy.Description
		if err != nil || info == nil || json.Unmarshal(trimNUL(info), &desc) != nil || desc.Hash == "" {
			p.Close()
			continue
		}
		key := desc.Hash
		if desc.Engine {
			key = engineKey(desc.Hash)
		}
		if old := ps.byHash[key]; old != nil {
			// Two slots of one program: keep the first.
			p.Close()
			ps.bySlot[slot] = old
			continue
		}
		pr := &program{hash: key, prog: p, slot: slot, desc: desc}
		ps.byHash[key] = pr
		ps.bySlot[slot] = pr
		ps.noteSlot(slot, &pr.desc)
		maxSlot = max(maxSlot, slot+1)
	}
	ps.next = maxSlot
	for s := uint32(palbpf.FirstPolicySlot); s < maxSlot; s++ {
		if ps.bySlot[s] == nil {
			_ = progs.Delete(s)
			ps.unbind(s)
			ps.free = append(ps.free, s)
		}
	}
	ps.log.WithField("programs", len(ps.byHash)).Info("Adopted the policy programs in place")
}

func trimNUL(b []byte) []byte { return []byte(strings.TrimRight(string(b), "\x00")) }

// compile compiles a stage, from the cache when its inputs are the same
// values as before.
func (ps *programs) compile(in *policy.Input) (*policy.Program, error) {
	key, hold := inputKey(in)
	if e := ps.compiled[key]; e != nil {
		e.round = ps.round
		return e.prog, nil
	}
	p, err := policy.Compile(*in)
	if err != nil {
		return nil, err
	}
	ps.compiled[key] = &compiledEntry{prog: p, round: ps.round, hold: hold}
	return p, nil
}

// table lays a stage out for the engine, from the cache when its inputs
// are the same values as before (ErrNotEngine is cached too).
func (ps *programs) table(in *policy.Input) (*policy.Table, error) {
	key, hold := inputKey(in)
	if e := ps.tables[key]; e != nil {
		e.round = ps.round
		return e.table, e.err
	}
	t, err := policy.CompileTable(*in)
	if err != nil && !errors.Is(err, policy.ErrNotEngine) {
		return nil, err
	}
	ps.tables[key] = &compiledEntry{table: t, err: err, round: ps.round, hold: hold}
	return t, err
}

// inputKey identifies an input by the identity of the calc values in it.
func inputKey(in *policy.Input) (string, []any) {
	var b strings.Builder
	var hold []any
	b.WriteString(strconv.FormatBool(in.Final))
	for _, t := range in.Tiers {
		b.WriteString("|t:" + t.Name + ":" + string(t.DefaultAction))
		for _, p := range t.Policies {
			fmt.Fprintf(&b, ",%p/%d", p.Rules, len(p.Rules))
			hold = append(hold, p.Rules)
			b.WriteString(p.ID.String())
		}
	}
	for _, p := range in.Profiles {
		fmt.Fprintf(&b, "|p:%s:%p/%d", p.Name, p.Rules, len(p.Rules))
		hold = append(hold, p.Rules)
	}
	return b.String(), hold
}

// endCompile ends a round of applies. It keeps the cache entries the
// round used and, of the others, the latest one of each program still in
// use: a new pod of a known deployment finds its stages compiled, though
// the apply that compiled them was long ago (compiling a stage of ten
// policies took a millisecond). Entries of values the calc replaced go
// with their programs, or once a newer entry made the same program.
func (ps *programs) endCompile() {
	for _, cache := range []map[string]*compiledEntry{ps.compiled, ps.tables} {
		latest := make(map[string]uint64, len(cache))
		for _, e := range cache {
			latest[e.hash()] = max(latest[e.hash()], e.round)
		}
		for k, e := range cache {
			if e.round == ps.round {
				continue
			}
			if p := ps.byHash[e.hash()]; p != nil && p.refs > 0 && e.round == latest[e.hash()] {
				continue
			}
			delete(cache, k)
		}
	}
	ps.round++
}

// get returns the program of a stage and takes a reference on it: the
// stub of an engine stage (laid out when new), or, when the engine does
// not take the stage (ErrNotEngine, its memory full, not in use), a
// program of instructions (loaded when new).
func (ps *programs) get(in *policy.Input) (*program, error) {
	if ps.eng != nil && ps.useEngine {
		p, err := ps.getEngine(in)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, policy.ErrNotEngine) {
			ps.log.WithError(err).Warn("Policy stage not laid out for the engine: compiled into instructions")
		}
	}
	return ps.getCompiled(in)
}

// getEngine returns the stub of the engine stage of in, its stage bound
// to its slot. A stub a previous felix left with the same rules keeps
// its slot (and program): this felix's stage is bound to it in place.
func (ps *programs) getEngine(in *policy.Input) (*program, error) {
	t, err := ps.table(in)
	if err != nil {
		return nil, err
	}
	key := engineKey(t.Hash)
	if p := ps.byHash[key]; p != nil {
		if p.stage == nil {
			st, err := ps.eng.Stage(t)
			if err != nil {
				return nil, err
			}
			if err := ps.eng.Bind(p.slot, st); err != nil {
				ps.eng.Release(st)
				return nil, err
			}
			p.stage = st
		}
		p.refs++
		return p, nil
	}
	st, err := ps.eng.Stage(t)
	if err != nil {
		return nil, err
	}
	desc := policy.Description{Hash: t.Hash, Slots: t.Slots, Engine: true}
	info, err := json.Marshal(desc)
	if err != nil {
		ps.eng.Release(st)
		return nil, err
	}
	prog, err := ps.objs.LoadPolicy("pal_"+t.Hash[:11], policy.Stub(), info)
	ps.metrics.ProgramLoaded(err)
	if err != nil {
		ps.eng.Release(st)
		return nil, err
	}
	slot := ps.alloc()
	if err := ps.eng.Bind(slot, st); err != nil {
		ps.eng.Release(st)
		prog.Close()
		ps.free = append(ps.free, slot)
		return nil, err
	}
	if err := ps.objs.Maps[palbpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		ps.eng.Release(st) // unbinds the slot
		prog.Close()
		ps.free = append(ps.free, slot)
		return nil, fmt.Errorf("policy stub %s in slot %d: %w", t.Hash[:11], slot, err)
	}
	ps.loads++
	p := &program{hash: key, prog: prog, slot: slot, desc: desc, refs: 1, stage: st}
	ps.byHash[key] = p
	ps.bySlot[slot] = p
	ps.noteSlot(slot, &p.desc)
	return p, nil
}

// unbind empties a slot's word in the engine's memory: a program of
// instructions put in a slot an engine stage (this felix's or an
// earlier one's) had must run, not be decided in its place.
func (ps *programs) unbind(slot uint32) {
	if ps.eng != nil {
		ps.eng.Unbind(slot)
	}
}

// getCompiled returns the loaded program of instructions of a stage
// (loading it when new) and takes a reference on it.
func (ps *programs) getCompiled(in *policy.Input) (*program, error) {
	cp, err := ps.compile(in)
	if err != nil {
		return nil, err
	}
	if p := ps.byHash[cp.Hash]; p != nil {
		p.refs++
		return p, nil
	}
	desc := policy.Description{Hash: cp.Hash, Slots: cp.Slots}
	info, err := json.Marshal(desc)
	if err != nil {
		return nil, err
	}
	prog, err := ps.objs.LoadPolicy("pal_"+cp.Hash[:11], cp.Insns, info)
	ps.metrics.ProgramLoaded(err)
	if err != nil {
		return nil, err
	}
	slot := ps.alloc()
	ps.unbind(slot)
	if err := ps.objs.Maps[palbpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		prog.Close()
		ps.free = append(ps.free, slot)
		return nil, fmt.Errorf("policy program %s in slot %d: %w", cp.Hash[:11], slot, err)
	}
	ps.loads++
	p := &program{hash: cp.Hash, prog: prog, slot: slot, desc: desc, refs: 1}
	ps.byHash[p.hash] = p
	ps.bySlot[slot] = p
	ps.noteSlot(slot, &p.desc)
	return p, nil
}

// dropProgram is the slot of a program that drops everything (fail
// closed for a stage that cannot be compiled).
func (ps *programs) dropProgram() (uint32, error) {
	if ps.dropSlot != 0 {
		return ps.dropSlot, nil
	}
	slot := ps.alloc()
	ps.unbind(slot)
	if err := ps.objs.Maps[palbpf.MapProgs].Put(slot, uint32(ps.objs.Drop.FD())); err != nil {
		ps.free = append(ps.free, slot)
		return 0, err
	}
	ps.dropSlot = slot
	return slot, nil
}

func (ps *programs) alloc() uint32 {
	if n := len(ps.free); n > 0 {
		sort.Slice(ps.free, func(i, j int) bool { return ps.free[i] > ps.free[j] })
		s := ps.free[n-1]
		ps.free = ps.free[:n-1]
		return s
	}
	s := ps.next
	ps.next++
	return s
}

func (ps *programs) release(p *program, now time.Time) {
	if p == nil {
		return
	}
	p.refs--
	if p.refs <= 0 {
		p.refs = 0
		p.idle = now
	}
}

// sweep unloads programs unused for idleKeep (all unused ones when force)
// and releases their engine stages; the engine frees what was released
// a grace period ago.
func (ps *programs) sweep(now time.Time, force bool) error {
	var errs []error
	for h, p := range ps.byHash {
		if p.refs > 0 || (!force && now.Sub(p.idle) < idleKeep) {
			continue
		}
		// The slot's word first: its stub, if run, drops.
		if p.stage != nil {
			ps.eng.Release(p.stage)
			p.stage = nil
		} else if p.desc.Engine {
			ps.unbind(p.slot)
		}
		if err := ps.objs.Maps[palbpf.MapProgs].Delete(p.slot); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("clearing policy program slot %d: %w", p.slot, err))
			continue
		}
		p.prog.Close()
		delete(ps.byHash, h)
		if ps.bySlot[p.slot] == p {
			delete(ps.bySlot, p.slot)
			ps.noteSlot(p.slot, nil)
		}
		ps.free = append(ps.free, p.slot)
	}
	if ps.eng != nil {
		ps.eng.Collect(now)
	}
	return errors.Join(errs...)
}
