package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
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

// BenchmarkPolicyPacket measures the per-packet cost of policy with 0,
// 100 and 1,000 rules on the path: a new flow's packet out of a workload
// that walks every rule (none matches; the stage then denies), through
// parsing, anti-spoofing, the conntrack lookup, the stage and the resume
// program, with BPF_PROG_TEST_RUN. Each is measured alternately with the
// same walk through a stage of no rule (the reference), seven times
// (200,000 packets each, fewer for the longer walks); the medians are compared. "established" is a packet
// of a flow conntrack knows (no stage runs).
func BenchmarkPolicyPacket(b *testing.B) {
	e := newBed(b)
	pkt := tcp("10.0.0.1", "10.0.0.2", 9).bytes()
	refSlot := e.load(Input{Final: true})
	prog := e.objs.Entry[0][bpf.In]
	for _, n := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			slot := e.load(manyRules(n))
			e.memberOf("s:many", "10.0.0.2")
			var ours, ref []time.Duration
			repeat := 200000 / (1 + n/100)
			for range 7 {
				for _, s := range []uint32{slot, refSlot} {
					e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: s}, "10.0.0.1/32")
					d, v := e.perPacket(b, prog, pkt, repeat)
					if v != 2 {
						b.Fatalf("verdict %d, want a drop (no CT entry, every rule walked)", v)
					}
					if s == slot {
						ours = append(ours, d)
					} else {
						ref = append(ref, d)
					}
				}
			}
			o, r := median(ours), median(ref)
			b.ReportMetric(float64(o.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(r.Nanoseconds()), "ref-ns/pkt")
			b.ReportMetric(float64(o)/float64(r), "x/ref")
		})
	}
	b.Run("established", func(b *testing.B) {
		allow := e.load(Input{Final: true, Profiles: []Profile{{Name: "all", Rules: []calc.Rule{{Action: calc.Allow}}}}})
		e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: allow}, "10.0.0.1/32")
		var est, ref []time.Duration
		for range 7 {
			e.clearCT()
			d, v := e.perPacket(b, prog, pkt, 200000)
			if v != -1 {
				b.Fatalf("verdict %d, want allowed", v)
			}
			est = append(est, d)
			e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: refSlot}, "10.0.0.1/32")
			e.clearCT()
			d, _ = e.perPacket(b, prog, pkt, 200000)
			ref = append(ref, d)
			e.endpoint(loIfindex, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: allow}, "10.0.0.1/32")
		}
		o, r := median(est), median(ref)
		b.ReportMetric(float64(o.Nanoseconds()), "ns/pkt")
		b.ReportMetric(float64(r.Nanoseconds()), "ref-ns/pkt")
		b.ReportMetric(float64(o)/float64(r), "x/ref")
	})
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
