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
// every endpoint stage whose rules compile to the same instructions.
type program struct {
	hash string
	prog *ebpf.Program
	slot uint32
	refs int
	desc policy.Description
	// idle is when the last reference went.
	idle time.Time
}

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
}

type compiledEntry struct {
	prog *policy.Program
	// round is the last round of applies that took it.
	round uint64
	hold  []any
}

// idleKeep is how long an unused program stays loaded: an endpoint whose
// policy flips back and forth does not load it again each time.
const idleKeep = 30 * time.Second

func newPrograms(objs *palbpf.Objects, logger *log.Entry) *programs {
	return &programs{objs: objs, log: logger, byHash: map[string]*program{}, bySlot: map[uint32]*program{},
		next: palbpf.FirstPolicySlot, compiled: map[string]*compiledEntry{}}
}

func (ps *programs) close() {
	for _, p := range ps.byHash {
		p.prog.Close()
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
		if old := ps.byHash[desc.Hash]; old != nil {
			// Two slots of one program: keep the first.
			p.Close()
			ps.bySlot[slot] = old
			continue
		}
		pr := &program{hash: desc.Hash, prog: p, slot: slot, desc: desc}
		ps.byHash[desc.Hash] = pr
		ps.bySlot[slot] = pr
		maxSlot = max(maxSlot, slot+1)
	}
	ps.next = maxSlot
	for s := uint32(palbpf.FirstPolicySlot); s < maxSlot; s++ {
		if ps.bySlot[s] == nil {
			_ = progs.Delete(s)
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
	latest := make(map[string]uint64, len(ps.compiled))
	for _, e := range ps.compiled {
		latest[e.prog.Hash] = max(latest[e.prog.Hash], e.round)
	}
	for k, e := range ps.compiled {
		if e.round == ps.round {
			continue
		}
		if p := ps.byHash[e.prog.Hash]; p != nil && p.refs > 0 && e.round == latest[e.prog.Hash] {
			continue
		}
		delete(ps.compiled, k)
	}
	ps.round++
}

// get returns the loaded program of a stage (loading it when new) and
// takes a reference on it.
func (ps *programs) get(in *policy.Input) (*program, error) {
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
	if err := ps.objs.Maps[palbpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		prog.Close()
		ps.free = append(ps.free, slot)
		return nil, fmt.Errorf("policy program %s in slot %d: %w", cp.Hash[:11], slot, err)
	}
	ps.loads++
	p := &program{hash: cp.Hash, prog: prog, slot: slot, desc: desc, refs: 1}
	ps.byHash[p.hash] = p
	ps.bySlot[slot] = p
	return p, nil
}

// dropProgram is the slot of a program that drops everything (fail
// closed for a stage that cannot be compiled).
func (ps *programs) dropProgram() (uint32, error) {
	if ps.dropSlot != 0 {
		return ps.dropSlot, nil
	}
	slot := ps.alloc()
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

// sweep unloads programs unused for idleKeep (all unused ones when force).
func (ps *programs) sweep(now time.Time, force bool) error {
	var errs []error
	for h, p := range ps.byHash {
		if p.refs > 0 || (!force && now.Sub(p.idle) < idleKeep) {
			continue
		}
		if err := ps.objs.Maps[palbpf.MapProgs].Delete(p.slot); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("clearing policy program slot %d: %w", p.slot, err))
			continue
		}
		p.prog.Close()
		delete(ps.byHash, h)
		if ps.bySlot[p.slot] == p {
			delete(ps.bySlot, p.slot)
		}
		ps.free = append(ps.free, p.slot)
	}
	return errors.Join(errs...)
}
