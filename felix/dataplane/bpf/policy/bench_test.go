package policy

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// loIfindex is the loopback interface, where BPF_PROG_TEST_RUN puts a
// packet given no context.
const loIfindex = 1

// perPacket times a packet through the workload entry program (and the
// stage it tail-calls) with BPF_PROG_TEST_RUN, in ns per packet.
func (e *bed) perPacket(b *testing.B, prog *ebpf.Program, pkt []byte, repeat int) (time.Duration, int32) {
	b.Helper()
	var d time.Duration
	var ret uint32
	if err := e.run.Do(func() error {
		var err error
		ret, d, err = prog.Benchmark(pkt, repeat, nil)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return d, int32(ret)
}

// BenchmarkPolicyPacket measures the per-packet cost of policy: a new
// flow's packet out of a workload through parsing, anti-spoofing, the
// conntrack lookup, the stage and the resume program, with
// BPF_PROG_TEST_RUN, for stages compiled into instructions and for the
// policy engine. Every case's packet is dropped (no conntrack entry, so
// each run is a new flow).
//
//   - rules=N: N rules (TCP, one port each, to a set member in
//     10.0.0.0/8) to port 9, which none names: the guards over groups of
//     rules (docs/bpf.md) jump over them;
//   - rules=1000-inrange: a port a rule names, at an address outside the
//     set: the guards lead into that rule's group, whose rules are walked;
//   - mix=N: N rules of issue 28's mix (mixedRules: a third ports, a third
//     CIDRs, a third selectors), matching none; mix=N-late: the same, the
//     last rule a Deny the packet matches;
//   - engine/…: the same stages for the engine (mix=10000 too, which
//     instructions cannot hold).
//
// Each is measured alternately with the same walk through the two stages
// of no rule (compiled, and the engine's), seven times (200,000 packets
// each, fewer for the longer walks), and the medians are compared:
// x/ref against the compiled stage of no rule, x/eref against the
// engine's. "established" is a packet of a flow conntrack knows (no stage
// runs).
func BenchmarkPolicyPacket(b *testing.B) {
	e := newBed(b)
	refSlot := e.load(Input{Final: true})
	erefSlot := e.loadEngine(Input{Final: true})
	prog := e.objs.Entry[0][bpf.In]
	e.memberOf("s:many", "10.0.0.2")
	for _, c := range []struct {
		name   string
		in     func() Input
		engine bool
		pkt    packet
	}{
		{"rules=0", func() Input { return manyRules(0) }, false, tcp("10.0.0.1", "10.0.0.2", 9)},
		{"rules=100", func() Input { return manyRules(100) }, false, tcp("10.0.0.1", "10.0.0.2", 9)},
		{"rules=1000", func() Input { return manyRules(1000) }, false, tcp("10.0.0.1", "10.0.0.2", 9)},
		{"rules=1000-inrange", func() Input { return manyRules(1000) }, false, tcp("10.0.0.1", "10.0.0.3", 10500)},
		{"mix=100", func() Input { return mixedRules(100, false) }, false, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"mix=1000", func() Input { return mixedRules(1000, false) }, false, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"mix=1000-late", func() Input { return mixedRules(1000, true) }, false, tcp("10.0.0.1", "10.250.0.9", 9)},
		{"engine/rules=0", func() Input { return manyRules(0) }, true, tcp("10.0.0.1", "10.0.0.2", 9)},
		{"engine/rules=1000", func() Input { return manyRules(1000) }, true, tcp("10.0.0.1", "10.0.0.2", 9)},
		{"engine/mix=0", func() Input { return mixedRules(0, false) }, true, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"engine/mix=100", func() Input { return mixedRules(100, false) }, true, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"engine/mix=1000", func() Input { return mixedRules(1000, false) }, true, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"engine/mix=1000-late", func() Input { return mixedRules(1000, true) }, true, tcp("10.0.0.1", "10.250.0.9", 9)},
		{"engine/mix=10000", func() Input { return mixedRules(10000, false) }, true, tcp("10.0.0.1", "10.0.0.3", 9)},
		{"engine/mix=10000-late", func() Input { return mixedRules(10000, true) }, true, tcp("10.0.0.1", "10.250.0.9", 9)},
	} {
		pkt := c.pkt.bytes()
		var o, r, er, load time.Duration
		b.Run(c.name, func(b *testing.B) {
			// Measured once: a body faster than a second is called
			// again with a larger b.N, which it does not use.
			if r == 0 {
				in := c.in()
				n := 0
				for _, t := range in.Tiers {
					for _, p := range t.Policies {
						n += len(p.Rules)
					}
				}
				var slot uint32
				t0 := time.Now()
				if c.engine {
					slot = e.loadEngine(in)
				} else {
					slot = e.load(in)
				}
				load = time.Since(t0)
				repeat := 200000 / (1 + n/100)
				if c.engine {
					repeat = 200000
				}
				o, r, er = e.walkCost(b, prog, pkt, slot, refSlot, erefSlot, repeat)
			}
			b.ReportMetric(float64(o.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(r.Nanoseconds()), "ref-ns/pkt")
			b.ReportMetric(float64(o)/float64(r), "x/ref")
			b.ReportMetric(float64(o)/float64(er), "x/eref")
			b.ReportMetric(float64(load.Microseconds())/1000, "load-ms")
		})
	}
	pkt := tcp("10.0.0.1", "10.0.0.2", 9).bytes()
	var o, r time.Duration
	b.Run("established", func(b *testing.B) {
		if r == 0 {
			o, r = e.establishedCost(b, prog, pkt, refSlot)
		}
		b.ReportMetric(float64(o.Nanoseconds()), "ns/pkt")
		b.ReportMetric(float64(r.Nanoseconds()), "ref-ns/pkt")
		b.ReportMetric(float64(o)/float64(r), "x/ref")
	})
}

// mixedRules is a stage of n rules of the mix: a third TCP to one
// port each (as manyRules), a third to a CIDR of their own, a third from
// a selector's IP set of their own (empty): a packet to port 9 matches
// none, and the CIDR and selector rules have no port a guard could skip
// them by. With late, the last rule is a Deny to 10.250.0.0/24.
func mixedRules(n int, late bool) Input {
	var rules []calc.Rule
	for i := range n {
		switch {
		case late && i == n-1:
			rules = append(rules, calc.Rule{Action: calc.Deny, DstNets: pfx("10.250.0.0/24"), Index: i})
		case i%3 == 0:
			port := uint16(10000 + i)
			rules = append(rules, calc.Rule{Action: calc.Allow, Protocol: 6, DstIPSets: []string{"s:many"},
				DstPorts: []calc.PortRange{{Min: port, Max: port}}, Index: i})
		case i%3 == 1:
			rules = append(rules, calc.Rule{Action: calc.Allow, DstNets: pfx(fmt.Sprintf("10.%d.%d.0/24", 1+i/256, i%256)), Index: i})
		default:
			rules = append(rules, calc.Rule{Action: calc.Allow, SrcIPSets: []string{fmt.Sprintf("s:mix%d", i)}, Index: i})
		}
	}
	return Input{Final: true, Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "mixed"}, Rules: rules}}}}}
}

// walkCost times a new flow's packet through the stage in slot against
// the stages in refSlot and erefSlot, alternately, seven times; it
// returns the medians.
func (e *bed) walkCost(b *testing.B, prog *ebpf.Program, pkt []byte, slot, refSlot, erefSlot uint32, repeat int) (ours, ref, eref time.Duration) {
	var os, rs, es []time.Duration
	for range 7 {
		for _, s := range []uint32{slot, refSlot, erefSlot} {
			e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: s}, "10.0.0.1/32")
			d, v := e.perPacket(b, prog, pkt, repeat)
			if v != 2 {
				b.Fatalf("verdict %d, want a drop (no CT entry, no rule matched)", v)
			}
			switch s {
			case slot:
				os = append(os, d)
			case refSlot:
				rs = append(rs, d)
			default:
				es = append(es, d)
			}
		}
	}
	return median(os), median(rs), median(es)
}

// establishedCost times a packet of a flow conntrack knows against the
// new flow's walk through the stage in refSlot, alternately, seven times;
// it returns the medians.
func (e *bed) establishedCost(b *testing.B, prog *ebpf.Program, pkt []byte, refSlot uint32) (est, ref time.Duration) {
	allow := e.load(Input{Final: true, Profiles: []Profile{{Name: "all", Rules: []calc.Rule{{Action: calc.Allow}}}}})
	e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: allow}, "10.0.0.1/32")
	var es, rs []time.Duration
	for range 7 {
		e.clearCT()
		d, v := e.perPacket(b, prog, pkt, 200000)
		if v != -1 {
			b.Fatalf("verdict %d, want allowed", v)
		}
		es = append(es, d)
		e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: refSlot}, "10.0.0.1/32")
		e.clearCT()
		d, _ = e.perPacket(b, prog, pkt, 200000)
		rs = append(rs, d)
		e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: allow}, "10.0.0.1/32")
	}
	return median(es), median(rs)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// BenchmarkMapLookup measures what one map lookup costs a program, the
// unit of a per-packet policy decision that does not walk the rules
// (felix/dataplane/bpf/DESIGN.md, "Towards a per-packet cost independent
// of the rule count"): an LPM trie like pal_sets (64-bit id, then the
// address) of 10 to 100,000 members, a hash of the same key, and an
// array. A program looks one key up 1 and 33 times (BPF_PROG_TEST_RUN,
// 200,000 runs each); the difference over 32 is one lookup.
func BenchmarkMapLookup(b *testing.B) {
	nstest.RequireRoot(b)
	r := rand.New(rand.NewPCG(28, 1))
	// A pal_sets key: prefix length, the set's 64-bit id, the address
	// (IPv4-mapped).
	key := func(bits int) []byte {
		k := make([]byte, 28)
		binary.LittleEndian.PutUint32(k, uint32(64+96+bits))
		binary.BigEndian.PutUint64(k[4:], 0x5041)
		k[22], k[23] = 0xff, 0xff
		binary.BigEndian.PutUint32(k[24:], r.Uint32()&^(1<<(32-bits)-1))
		return k
	}
	fill := func(typ ebpf.MapType, n int) (*ebpf.Map, []byte) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: typ, KeySize: 28, ValueSize: 4, MaxEntries: uint32(n), Flags: unix.BPF_F_NO_PREALLOC})
		if err != nil {
			b.Fatal(err)
		}
		var k []byte
		for i := range n {
			// Members as a set's: mostly pods' /32s, some /24 nets.
			bits := 32
			if i%8 == 0 && typ == ebpf.LPMTrie {
				bits = 24
			}
			k = key(bits)
			if err := m.Put(k, uint32(i)); err != nil {
				b.Fatal(err)
			}
		}
		binary.LittleEndian.PutUint32(k, 64+128)
		return m, k
	}
	for _, c := range []struct {
		name string
		typ  ebpf.MapType
		n    int
	}{
		{"lpm=10", ebpf.LPMTrie, 10}, {"lpm=1000", ebpf.LPMTrie, 1000}, {"lpm=10000", ebpf.LPMTrie, 10000},
		{"lpm=100000", ebpf.LPMTrie, 100000}, {"hash=10000", ebpf.Hash, 10000}, {"array", ebpf.Array, 0},
	} {
		var per time.Duration
		b.Run(c.name, func(b *testing.B) {
			if per == 0 {
				var m *ebpf.Map
				var k []byte
				if c.typ == ebpf.Array {
					var err error
					m, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1 << 20})
					if err != nil {
						b.Fatal(err)
					}
					k = binary.LittleEndian.AppendUint32(nil, 12345)
				} else {
					m, k = fill(c.typ, c.n)
				}
				defer m.Close()
				once, many := lookupLoop(b, m, k, 1), lookupLoop(b, m, k, 33)
				per = (many - once) / 32
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/lookup")
		})
	}
}

// lookupLoop is the median time of a program that looks key up in m n
// times.
func lookupLoop(b *testing.B, m *ebpf.Map, key []byte, n int) time.Duration {
	var insns asm.Instructions
	for i := 0; i < len(key); i += 4 {
		insns = append(insns, asm.StoreImm(asm.RFP, int16(-32+i), int64(int32(binary.LittleEndian.Uint32(key[i:]))), asm.Word))
	}
	insns = append(insns,
		asm.Mov.Imm(asm.R6, int32(n)),
		asm.LoadMapPtr(asm.R1, m.FD()).WithSymbol("loop"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -32),
		asm.FnMapLookupElem.Call(),
		asm.Sub.Imm(asm.R6, 1),
		asm.JNE.Imm(asm.R6, 0, "loop"),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual MIT/GPL", Instructions: insns})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var ds []time.Duration
	for range 5 {
		_, d, err := p.Benchmark(make([]byte, 64), 200000, nil)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	return median(ds)
}

// BenchmarkEngineBuild measures what felix spends on a new stage of
// 10,000 rules of the mix for the engine, without the kernel: compiling
// the table (rule ids and descriptions included) and laying it out with
// its addresses' identities, in a fresh engine. It reports wall and CPU
// time (the process's, so a loaded machine shows in the first only).
func BenchmarkEngineBuild(b *testing.B) {
	for _, late := range []bool{false, true} {
		b.Run(fmt.Sprintf("mix=10000/late=%v", late), func(b *testing.B) {
			in := mixedRules(10000, late)
			var wall, cpu time.Duration
			for range b.N {
				mem := make(SliceMem, Words)
				e, err := NewEngine(mem, newFakeID6())
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC() // not the last round's garbage
				c0, t0 := processCPU(), time.Now()
				t, err := CompileTable(in)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Stage(t); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
				cpu += processCPU() - c0
			}
			b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N), "wall-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms")
		})
	}
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
