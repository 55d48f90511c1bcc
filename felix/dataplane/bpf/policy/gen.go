package policy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"unsafe"

	"github.com/cilium/ebpf/asm"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// Verdicts (bpf.Verdict*).
const (
	verdictNone  = bpf.VerdictNone
	verdictAllow = bpf.VerdictAllow
	verdictDeny  = bpf.VerdictDeny
)

// Offsets into the state (R6 points at it).
var (
	st        bpf.State
	offSrc    = int16(unsafe.Offsetof(st.Src))
	offDst    = int16(unsafe.Offsetof(st.Dst))
	offSport  = int16(unsafe.Offsetof(st.Sport))
	offDport  = int16(unsafe.Offsetof(st.Dport))
	offProto  = int16(unsafe.Offsetof(st.Proto))
	offFamily = int16(unsafe.Offsetof(st.Family))
	offType   = int16(unsafe.Offsetof(st.IcmpType))
	offCode   = int16(unsafe.Offsetof(st.IcmpCode))
	offIf     = int16(unsafe.Offsetof(st.Ifindex))
	offPhase  = int16(unsafe.Offsetof(st.Phase))
	offVerd   = int16(unsafe.Offsetof(st.Verdict))
	offRule   = int16(unsafe.Offsetof(st.Rule))
	offResume = int16(unsafe.Offsetof(st.Resume))
	offLen    = int16(unsafe.Offsetof(st.Len))
	offRuleID = int16(unsafe.Offsetof(st.RuleId))
	stateSize = int32(unsafe.Sizeof(st))
)

// The program's stack (R10-relative): the LPM keys of the source and the
// destination (their address filled once), a named-port key, a counter
// key and a first counter value.
var (
	setKeySize  = int16(unsafe.Sizeof(bpf.SetKey{}))
	portKeySize = int16(unsafe.Sizeof(bpf.PortKey{}))
	stkSrcKey   = -align8(setKeySize)
	stkDstKey   = stkSrcKey - align8(setKeySize)
	stkPortKey  = stkDstKey - align8(portKeySize)
	counterKey  = int16(unsafe.Sizeof(bpf.CounterKey{}))
	counterVal  = int16(unsafe.Sizeof(bpf.CounterValue{}))
	stkCounter  = stkPortKey - align8(counterKey)
	stkValue    = stkCounter - align8(counterVal)
)

func align8(n int16) int16 { return (n + 7) &^ 7 }

// Registers: R6 the state, R9 the context; R0–R5 scratch (helpers clobber
// them).
const (
	rState = asm.R6
	rCtx   = asm.R9
)

type gen struct {
	insns   asm.Instructions
	slots   []Slot
	pending []string // labels for the next instruction
	labels  int
	// dead: the next instruction is reached by no path (after a jump or
	// a verdict, until a label something jumps to); the verifier refuses
	// unreachable code, so nothing is emitted there.
	dead bool
	refs map[string]bool
	fail error
	// src and dst: the set keys hold the packet's addresses.
	src, dst bool
	// known is what the guards around the code being emitted proved of
	// the packet.
	known known
	// note is a comment for the next instruction emitted.
	note string
	// owner is the digest of the rules of the policy or profile whose
	// rule is being emitted (empty for an implicit end), for its slots'
	// RuleID.
	owner string
}

// known is what every packet reaching a point of the program has: a
// protocol (0: any) and a destination port within [lo, hi].
type known struct {
	proto  uint8
	lo, hi uint16
}

func anything() known { return known{lo: 0, hi: 0xffff} }

func newGen() *gen { return &gen{refs: map[string]bool{}, known: anything()} }

func (g *gen) err() error { return g.fail }

// emit appends an instruction, with the pending label if there is one.
func (g *gen) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if g.dead {
			continue
		}
		if ref := in.Reference(); ref != "" && in.OpCode.Class().IsJump() {
			g.refs[ref] = true
		}
		if g.note != "" {
			// The rule's comment goes on its first instruction (no
			// instruction of its own: that would run for every packet).
			c := g.note
			if src := in.Source(); src != nil {
				c += "; " + src.String()
			}
			in = in.WithSource(asm.Comment(c))
			g.note = ""
		}
		if len(g.pending) > 0 {
			// One symbol per instruction: extra labels get a no-op each.
			for _, l := range g.pending[1:] {
				g.insns = append(g.insns, asm.Mov.Reg(rState, rState).WithSymbol(l))
			}
			in = in.WithSymbol(g.pending[0])
			g.pending = g.pending[:0]
		}
		g.insns = append(g.insns, in)
		if in.OpCode.JumpOp() == asm.Ja || in.OpCode.JumpOp() == asm.Exit {
			g.dead = true
		}
	}
}

func (g *gen) commented(c string, ins asm.Instruction) asm.Instruction {
	return ins.WithSource(asm.Comment(c))
}

// label makes the next instruction the target of name. Every jump is
// forward, so whether one targets it is known here.
func (g *gen) label(name string) {
	if !g.refs[name] {
		return
	}
	g.dead = false
	g.pending = append(g.pending, name)
}

func (g *gen) newLabel(prefix string) string {
	g.labels++
	return fmt.Sprintf("%s%d", prefix, g.labels)
}

func mapRef(dst asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(dst, 0).WithReference(name)
}

// prologue keeps the context, finds the state and fills the set keys.
func (g *gen) prologue(src, dst bool) {
	g.src, g.dst = src, dst
	g.emit(
		g.commented("keep the context for the tail call", asm.Mov.Reg(rCtx, asm.R1)),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		mapRef(asm.R1, bpf.MapState),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "have_state"),
		asm.Mov.Imm(asm.R0, 2),
		asm.Return(),
	)
	g.label("have_state")
	g.emit(asm.Mov.Reg(rState, asm.R0))
	for _, k := range []struct {
		on        bool
		stk, addr int16
		what      string
	}{{src, stkSrcKey, offSrc, "source"}, {dst, stkDstKey, offDst, "destination"}} {
		if !k.on {
			continue
		}
		g.emit(g.commented("IP set key of the "+k.what, asm.StoreImm(asm.RFP, k.stk, 64+128, asm.Word)))
		for i := int16(0); i < 4; i++ {
			g.emit(
				asm.LoadMem(asm.R1, rState, k.addr+4*i, asm.Word),
				asm.StoreMem(asm.RFP, k.stk+12+4*i, asm.R1, asm.Word),
			)
		}
	}
}

// epilogue: the verdict tails store the verdict and the rule id (R1) in
// the state; then back to the resume program.
func (g *gen) epilogue() {
	for _, t := range verdicts {
		g.label(t.label)
		g.emit(
			g.commented("verdict "+t.label[len("verdict_"):], asm.StoreImm(rState, offVerd, int64(t.v), asm.Byte)),
			asm.StoreMem(rState, offRuleID, asm.R1, asm.DWord),
			asm.Ja.Label("out"),
		)
	}
	g.label("out")
	g.emit(
		g.commented("tail call the resume program", asm.Mov.Reg(asm.R1, rCtx)),
		mapRef(asm.R2, bpf.MapProgs),
		asm.LoadMem(asm.R3, rState, offResume, asm.Byte),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, 2),
		asm.Return(),
	)
}

// slot records a counter slot, with its stable rule id, and returns it.
func (g *gen) slot(s Slot) Slot {
	s.Slot = len(g.slots)
	s.ID = RuleID(s, g.owner)
	g.slots = append(g.slots, s)
	return s
}

// verdicts are the labels of the shared verdict tails, by verdict.
var verdicts = []struct {
	v     uint8
	label string
}{{verdictAllow, "verdict_allow"}, {verdictDeny, "verdict_deny"}, {verdictNone, "verdict_none"}}

// verdict ends the walk with v, counted under slot s's rule id: the id
// goes in R1 and a shared tail stores it with the verdict (three
// instructions a rule, which keeps a thousand rules within MaxInsns).
func (g *gen) verdict(v uint8, s Slot) {
	s = g.slot(s)
	for _, t := range verdicts {
		if t.v == v {
			g.emit(
				g.commented(fmt.Sprintf("slot %d: %s (%s)", s.Slot, s.Action, s.Match), asm.LoadImm(asm.R1, int64(s.ID), asm.DWord)),
				asm.Ja.Label(t.label),
			)
		}
	}
}

// count adds the packet to the counter of slot s (for Pass and Log
// rules, which do not end the walk): the key is the interface, the stage
// and the rule id, as the resume program counts a verdict.
func (g *gen) count(s Slot) {
	have, done := g.newLabel("count_have"), g.newLabel("count_done")
	g.emit(
		asm.LoadMem(asm.R1, rState, offIf, asm.Word),
		asm.StoreMem(asm.RFP, stkCounter, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, rState, offPhase, asm.Byte),
		asm.StoreMem(asm.RFP, stkCounter+4, asm.R1, asm.Byte),
		asm.StoreImm(asm.RFP, stkCounter+5, 0, asm.Byte),
		asm.StoreImm(asm.RFP, stkCounter+6, 0, asm.Half),
		asm.LoadImm(asm.R1, int64(s.ID), asm.DWord),
		asm.StoreMem(asm.RFP, stkCounter+8, asm.R1, asm.DWord),
		mapRef(asm.R1, bpf.MapCounters),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(stkCounter)),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, have),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stkValue, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, rState, offLen, asm.Word),
		asm.StoreMem(asm.RFP, stkValue+8, asm.R1, asm.DWord),
		mapRef(asm.R1, bpf.MapCounters),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(stkCounter)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(stkValue)),
		asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
		asm.FnMapUpdateElem.Call(),
		asm.Ja.Label(done),
	)
	g.label(have)
	g.emit(
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
		asm.LoadMem(asm.R2, rState, offLen, asm.Word),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
	)
	g.label(done)
}

// placed is a rule, where it is, and the digest of its policy's or
// profile's rules (RuleID).
type placed struct {
	r     calc.Rule
	s     Slot
	owner string
}

// guardFan is how many rules (or groups of rules) a guard covers.
const guardFan = 16

// rules emits a run of rules that a packet matching none of them falls
// through (a tier's, across its policies, or a profile's). Groups of up
// to guardFan rules, and groups of up to guardFan such groups, get a
// guard: when every rule of the group needs the same protocol, or a
// destination port range, a packet of another protocol or a port outside
// the group's ranges jumps over the whole group, which none of its rules
// could match. Inside a guard the rules skip the checks it made.
func (g *gen) rules(rs []placed, pass string) {
	chunk := guardFan
	for (len(rs)+chunk-1)/chunk > guardFan {
		chunk *= guardFan
	}
	for lo := 0; lo < len(rs); lo += chunk {
		part := rs[lo:min(lo+chunk, len(rs))]
		outer := g.known
		skip := g.newLabel("group_end")
		g.guard(part, skip)
		if len(part) > guardFan {
			g.rules(part, pass)
		} else {
			for _, p := range part {
				g.owner = p.owner
				g.rule(p.r, p.s, pass)
				g.owner = ""
			}
		}
		g.known = outer
		g.label(skip)
	}
}

// guard emits the checks of a group that make the packet jump to skip,
// and records what they prove in g.known. A single rule gets none: its
// own checks are the same.
func (g *gen) guard(part []placed, skip string) {
	if len(part) < 2 {
		return
	}
	proto := part[0].r.Protocol
	lo, hi, ports := uint16(0xffff), uint16(0), true
	for _, p := range part {
		if p.r.Protocol != proto {
			proto = 0
		}
		if len(p.r.DstPorts) == 0 || len(p.r.DstNamedPortIPSets) > 0 {
			ports = false
		}
		for _, pr := range p.r.DstPorts {
			lo, hi = min(lo, pr.Min), max(hi, pr.Max)
		}
	}
	first := true
	comment := func(ins asm.Instruction) asm.Instruction {
		if first {
			first = false
			return g.commented(fmt.Sprintf("guard of %d rules from %s %s rule %d", len(part), part[0].s.Tier+part[0].s.Profile, part[0].s.Policy, part[0].s.Rule), ins)
		}
		return ins
	}
	if proto != 0 && g.known.proto != proto {
		g.emit(comment(asm.LoadMem(asm.R1, rState, offProto, asm.Byte)), asm.JNE.Imm(asm.R1, int32(proto), skip))
		g.known.proto = proto
	}
	if ports && (lo > g.known.lo || hi < g.known.hi) {
		g.emit(comment(asm.LoadMem(asm.R1, rState, offDport, asm.Half)))
		if lo > g.known.lo {
			g.emit(asm.JLT.Imm(asm.R1, int32(lo), skip))
			g.known.lo = lo
		}
		if hi < g.known.hi {
			g.emit(asm.JGT.Imm(asm.R1, int32(hi), skip))
			g.known.hi = hi
		}
	}
}

// rule emits one rule; a packet it does not match goes on after it, and a
// Pass jumps to pass.
func (g *gen) rule(r calc.Rule, s Slot, pass string) {
	s.Action = string(r.Action)
	s.Match = Describe(r)
	s.Index = r.Index
	next := g.newLabel("rule_end")
	g.note = fmt.Sprintf("%s %s rule %d: %s %s", s.Tier+s.Profile, s.Policy, s.Rule, s.Action, s.Match)
	g.match(r, next)
	switch r.Action {
	case calc.Allow:
		g.verdict(verdictAllow, s)
	case calc.Deny:
		g.verdict(verdictDeny, s)
	case calc.Pass:
		g.count(g.slot(s))
		g.emit(asm.Ja.Label(pass))
	case calc.Log:
		s = g.slot(s)
		g.emit(
			asm.StoreImm(rState, offRule, int64(s.Slot), asm.Half),
			mapRef(asm.R1, bpf.MapEvents),
			asm.Mov.Reg(asm.R2, rState),
			asm.Mov.Imm(asm.R3, stateSize),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
		)
		g.count(s)
	default:
		g.fail = fmt.Errorf("rule %d of %s%s: unknown action %q", s.Rule, s.Policy, s.Profile, r.Action)
	}
	g.label(next)
}

// portProtocols are those whose packets carry ports.
var portProtocols = []int32{6, 17, 132, 136}

// match emits the rule's checks: each jumps to fail when the packet does
// not match.
func (g *gen) match(r calc.Rule, fail string) {
	if r.IPVersion != 0 {
		g.emit(asm.LoadMem(asm.R1, rState, offFamily, asm.Byte), asm.JNE.Imm(asm.R1, int32(r.IPVersion), fail))
	}
	if r.Protocol != 0 && r.Protocol != g.known.proto {
		g.emit(asm.LoadMem(asm.R1, rState, offProto, asm.Byte), asm.JNE.Imm(asm.R1, int32(r.Protocol), fail))
	}
	if r.NotProtocol != 0 {
		g.emit(asm.LoadMem(asm.R1, rState, offProto, asm.Byte), asm.JEq.Imm(asm.R1, int32(r.NotProtocol), fail))
	}
	hasPorts := len(r.SrcPorts)+len(r.NotSrcPorts)+len(r.DstPorts)+len(r.NotDstPorts)+
		len(r.SrcNamedPortIPSets)+len(r.NotSrcNamedPortIPSets)+len(r.DstNamedPortIPSets)+len(r.NotDstNamedPortIPSets) > 0
	// A rule of a protocol with ports needs no further check of it.
	if hasPorts && !slices.Contains(portProtocols, int32(r.Protocol)) {
		ok := g.newLabel("has_ports")
		g.emit(asm.LoadMem(asm.R1, rState, offProto, asm.Byte))
		for _, p := range portProtocols {
			g.emit(asm.JEq.Imm(asm.R1, p, ok))
		}
		g.emit(asm.Ja.Label(fail))
		g.label(ok)
	}
	g.ports(r.SrcPorts, r.SrcNamedPortIPSets, offSport, offSrc, fail)
	g.dstPorts(r.DstPorts, r.DstNamedPortIPSets, fail)
	g.notPorts(r.NotSrcPorts, r.NotSrcNamedPortIPSets, offSport, offSrc, fail)
	g.notPorts(r.NotDstPorts, r.NotDstNamedPortIPSets, offDport, offDst, fail)
	if r.ICMPType != nil || r.NotICMPType != nil {
		g.requireICMP(fail)
	}
	if r.ICMPType != nil {
		g.emit(asm.LoadMem(asm.R1, rState, offType, asm.Byte), asm.JNE.Imm(asm.R1, int32(*r.ICMPType), fail))
		if r.ICMPCode != nil {
			g.emit(asm.LoadMem(asm.R1, rState, offCode, asm.Byte), asm.JNE.Imm(asm.R1, int32(*r.ICMPCode), fail))
		}
	}
	if r.NotICMPType != nil {
		other := g.newLabel("not_icmp_ok")
		g.emit(asm.LoadMem(asm.R1, rState, offType, asm.Byte), asm.JNE.Imm(asm.R1, int32(*r.NotICMPType), other))
		if r.NotICMPCode != nil {
			g.emit(asm.LoadMem(asm.R1, rState, offCode, asm.Byte), asm.JNE.Imm(asm.R1, int32(*r.NotICMPCode), other))
		}
		g.emit(asm.Ja.Label(fail))
		g.label(other)
	}
	g.nets(r.SrcNets, offSrc, fail)
	g.nets(r.DstNets, offDst, fail)
	// An address in a notNet fails the rule.
	for _, n := range r.NotSrcNets {
		g.net(n, offSrc, fail)
	}
	for _, n := range r.NotDstNets {
		g.net(n, offDst, fail)
	}
	for _, id := range r.SrcIPSets {
		g.setLookup(id, stkSrcKey)
		g.emit(asm.JEq.Imm(asm.R0, 0, fail))
	}
	for _, id := range r.NotSrcIPSets {
		g.setLookup(id, stkSrcKey)
		g.emit(asm.JNE.Imm(asm.R0, 0, fail))
	}
	for _, id := range r.DstIPSets {
		g.setLookup(id, stkDstKey)
		g.emit(asm.JEq.Imm(asm.R0, 0, fail))
	}
	for _, id := range r.NotDstIPSets {
		g.setLookup(id, stkDstKey)
		g.emit(asm.JNE.Imm(asm.R0, 0, fail))
	}
}

// requireICMP: the packet must be ICMP of its family.
func (g *gen) requireICMP(fail string) {
	v6 := g.newLabel("icmp_v6")
	ok := g.newLabel("icmp_ok")
	g.emit(
		asm.LoadMem(asm.R1, rState, offProto, asm.Byte),
		asm.LoadMem(asm.R2, rState, offFamily, asm.Byte),
		asm.JEq.Imm(asm.R2, 6, v6),
		asm.JEq.Imm(asm.R1, 1, ok),
		asm.Ja.Label(fail),
	)
	g.label(v6)
	g.emit(asm.JNE.Imm(asm.R1, 58, fail))
	g.label(ok)
}

// ports: the port must be in one of the ranges or the (address, port) in
// one of the named-port sets; nothing to check when both are empty.
func (g *gen) ports(ranges []calc.PortRange, named []string, offPort, offAddr int16, fail string) {
	if len(ranges) == 0 && len(named) == 0 {
		return
	}
	ok := g.newLabel("port_ok")
	g.portChecks(ranges, named, offPort, offAddr, ok)
	g.emit(asm.Ja.Label(fail))
	g.label(ok)
}

// dstPorts is ports for the destination port, which a guard may have
// bounded: a single range needs only the checks of its ends the guard did
// not make, and jumps to fail directly.
func (g *gen) dstPorts(ranges []calc.PortRange, named []string, fail string) {
	if len(ranges) != 1 || len(named) != 0 {
		g.ports(ranges, named, offDport, offDst, fail)
		return
	}
	p := ranges[0]
	if p.Min <= g.known.lo && p.Max >= g.known.hi {
		return // the guard proved it
	}
	g.emit(asm.LoadMem(asm.R1, rState, offDport, asm.Half))
	if p.Min == p.Max {
		g.emit(asm.JNE.Imm(asm.R1, int32(p.Min), fail))
		return
	}
	if p.Min > g.known.lo {
		g.emit(asm.JLT.Imm(asm.R1, int32(p.Min), fail))
	}
	if p.Max < g.known.hi {
		g.emit(asm.JGT.Imm(asm.R1, int32(p.Max), fail))
	}
}

// notPorts: the port must be in none of the ranges and sets.
func (g *gen) notPorts(ranges []calc.PortRange, named []string, offPort, offAddr int16, fail string) {
	if len(ranges) == 0 && len(named) == 0 {
		return
	}
	g.portChecks(ranges, named, offPort, offAddr, fail)
}

// portChecks jumps to hit when the port is in a range or a named set.
func (g *gen) portChecks(ranges []calc.PortRange, named []string, offPort, offAddr int16, hit string) {
	if len(ranges) > 0 {
		g.emit(asm.LoadMem(asm.R1, rState, offPort, asm.Half))
		for _, p := range ranges {
			if p.Min == p.Max {
				g.emit(asm.JEq.Imm(asm.R1, int32(p.Min), hit))
				continue
			}
			below := g.newLabel("port_below")
			g.emit(asm.JLT.Imm(asm.R1, int32(p.Min), below), asm.JLE.Imm(asm.R1, int32(p.Max), hit))
			g.label(below)
		}
	}
	for _, id := range named {
		g.portLookup(id, offPort, offAddr)
		g.emit(asm.JNE.Imm(asm.R0, 0, hit))
		if len(ranges) > 0 {
			// The lookup clobbered R1.
			g.emit(asm.LoadMem(asm.R1, rState, offPort, asm.Half))
		}
	}
}

// portLookup looks the (set, address, protocol, port) up in the named-port
// map; R0 is non-zero when it is a member.
func (g *gen) portLookup(id string, offPort, offAddr int16) {
	sid := bpf.SetID(id)
	g.emit(g.commented("named port set "+id, asm.StoreImm(asm.RFP, stkPortKey, int64(int32(sid>>32)), asm.Word)),
		asm.StoreImm(asm.RFP, stkPortKey+4, int64(int32(sid)), asm.Word))
	for i := int16(0); i < 4; i++ {
		g.emit(asm.LoadMem(asm.R1, rState, offAddr+4*i, asm.Word), asm.StoreMem(asm.RFP, stkPortKey+8+4*i, asm.R1, asm.Word))
	}
	g.emit(
		asm.LoadMem(asm.R1, rState, offPort, asm.Half),
		asm.StoreMem(asm.RFP, stkPortKey+24, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, rState, offProto, asm.Byte),
		asm.StoreMem(asm.RFP, stkPortKey+26, asm.R1, asm.Byte),
		asm.StoreImm(asm.RFP, stkPortKey+27, 0, asm.Byte),
		mapRef(asm.R1, bpf.MapPorts),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(stkPortKey)),
		asm.FnMapLookupElem.Call(),
	)
}

// setLookup looks the address of the key at stk up in a set; R0 is
// non-zero when it is a member.
func (g *gen) setLookup(id string, stk int16) {
	sid := bpf.SetID(id)
	g.emit(
		g.commented("IP set "+id, asm.StoreImm(asm.RFP, stk+4, int64(int32(sid>>32)), asm.Word)),
		asm.StoreImm(asm.RFP, stk+8, int64(int32(sid)), asm.Word),
		mapRef(asm.R1, bpf.MapSets),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(stk)),
		asm.FnMapLookupElem.Call(),
	)
}

// nets: the address must be in one of them (of its family); nothing to
// check when there are none.
func (g *gen) nets(nets []netip.Prefix, offAddr int16, fail string) {
	if len(nets) == 0 {
		return
	}
	ok := g.newLabel("net_ok")
	for _, n := range nets {
		g.net(n, offAddr, ok)
	}
	g.emit(asm.Ja.Label(fail))
	g.label(ok)
}

// net jumps to in when the address is in n (and of n's family).
func (g *gen) net(n netip.Prefix, offAddr int16, in string) {
	out := g.newLabel("net_out")
	fam := int32(6)
	if n.Addr().Is4() {
		fam = 4
	}
	g.emit(g.commented("net "+n.String(), asm.LoadMem(asm.R1, rState, offFamily, asm.Byte)), asm.JNE.Imm(asm.R1, fam, out))
	addr := bpf.Addr16(n.Masked().Addr())
	bits := bpf.PrefixLen16(n)
	for w := 0; w < 4; w++ {
		lo := w * 32
		if bits <= lo || (fam == 4 && w < 3) {
			continue
		}
		take := min(bits-lo, 32)
		var mask [4]byte
		for b := 0; b < take; b++ {
			mask[b/8] |= 0x80 >> (b % 8)
		}
		// The word is loaded as the CPU reads memory: compare it with
		// the address bytes read the same way.
		m := binary.NativeEndian.Uint32(mask[:])
		v := binary.NativeEndian.Uint32(addr[w*4 : w*4+4])
		g.emit(asm.LoadMem(asm.R1, rState, offAddr+int16(4*w), asm.Word))
		if take < 32 {
			g.emit(asm.And.Imm32(asm.R1, int32(m)))
		}
		g.emit(asm.JNE.Imm32(asm.R1, int32(v), out))
	}
	g.emit(asm.Ja.Label(in))
	g.label(out)
}

// Describe says what a rule matches, in short. It is appended without
// fmt (a stage of 10,000 rules spent a seventh of its build in
// Sprintf); TestDescribeFormat keeps it equal to the fmt form.
func Describe(r calc.Rule) string {
	b := make([]byte, 0, 64)
	sep := func(name string) {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, name...)
	}
	num := func(name string, v uint64) {
		if v != 0 {
			sep(name)
			b = strconv.AppendUint(b, v, 10)
		}
	}
	num("ipv", uint64(r.IPVersion))
	num("proto ", uint64(r.Protocol))
	num("!proto ", uint64(r.NotProtocol))
	// list writes name [a b …] as fmt's %v of a slice.
	list := func(name string, n int, one func(i int)) {
		if n == 0 {
			return
		}
		sep(name)
		b = append(b, " ["...)
		for i := range n {
			if i > 0 {
				b = append(b, ' ')
			}
			one(i)
		}
		b = append(b, ']')
	}
	nets := func(name string, ps []netip.Prefix) {
		list(name, len(ps), func(i int) {
			if ps[i].IsValid() {
				b = ps[i].AppendTo(b)
			} else {
				b = append(b, ps[i].String()...) // "invalid Prefix", as fmt
			}
		})
	}
	nets("src", r.SrcNets)
	nets("!src", r.NotSrcNets)
	nets("dst", r.DstNets)
	nets("!dst", r.NotDstNets)
	strs := func(name string, ss []string) {
		list(name, len(ss), func(i int) { b = append(b, ss[i]...) })
	}
	strs("src-sets", r.SrcIPSets)
	strs("!src-sets", r.NotSrcIPSets)
	strs("dst-sets", r.DstIPSets)
	strs("!dst-sets", r.NotDstIPSets)
	ports := func(name string, ps []calc.PortRange) {
		if len(ps) == 0 {
			return
		}
		sep(name)
		b = append(b, ' ')
		for i, p := range ps {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(p.Min), 10)
			if p.Min != p.Max {
				b = strconv.AppendUint(append(b, ':'), uint64(p.Max), 10)
			}
		}
	}
	ports("sport", r.SrcPorts)
	ports("!sport", r.NotSrcPorts)
	ports("dport", r.DstPorts)
	ports("!dport", r.NotDstPorts)
	strs("sport-sets", r.SrcNamedPortIPSets)
	strs("!sport-sets", r.NotSrcNamedPortIPSets)
	strs("dport-sets", r.DstNamedPortIPSets)
	strs("!dport-sets", r.NotDstNamedPortIPSets)
	icmp := func(name string, t, c *uint8) {
		if t == nil {
			return
		}
		sep(name)
		b = strconv.AppendUint(append(b, ' '), uint64(*t), 10)
		if c != nil {
			b = strconv.AppendUint(append(b, '/'), uint64(*c), 10)
		}
	}
	icmp("icmp", r.ICMPType, r.ICMPCode)
	icmp("!icmp", r.NotICMPType, r.NotICMPCode)
	if len(b) == 0 {
		return "any"
	}
	return string(b)
}
