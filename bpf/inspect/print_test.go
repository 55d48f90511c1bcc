package inspect

import (
	"bytes"
	"flag"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/libcalico/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestPrintGolden compares the dumps of `calico-node bpf …` with golden
// files, from a fixed view.
func TestPrintGolden(t *testing.T) {
	desc := &palbpf.Description{Hash: "abc", Slots: []palbpf.Slot{
		{Slot: 0, ID: 0xa0, Tier: "default", Policy: "ns-a/web", Rule: 0, Action: "Allow", Match: "proto 6 src-sets [s:x] dport 8080"},
		{Slot: 1, ID: 0xa1, Tier: "default", Rule: -1, Action: "Deny", Match: "end of tier default: no policy allowed or passed the packet"},
		{Slot: 2, ID: 0xa2, Profile: "kns.ns-a", Rule: 0, Action: "Allow", Match: "any"},
		{Slot: 3, ID: 0xa3, Rule: -1, Action: "Deny", Match: "no policy or profile allowed the packet"},
	}}
	web := Interface{Ifindex: 7, Name: "cali0123456789a", Kind: "workload", Sources: []netip.Prefix{netip.MustParsePrefix("10.65.0.1/32")}}
	web.Stages[palbpf.StageNormalIn] = &Stage{Slot: 5, Program: 101, Name: "pal_0123456789a", Desc: &palbpf.Description{Slots: []palbpf.Slot{{Slot: 0, Profile: "kns.ns-a", Action: "Allow", Match: "any"}, {Slot: 1, Rule: -1, Action: "Deny", Match: "no policy or profile allowed the packet"}}}}
	web.Stages[palbpf.StageNormalOut] = &Stage{Slot: 6, Program: 102, Name: "pal_abc", Desc: desc}
	blocked := Interface{Ifindex: 9, Name: "caliunknown", Kind: "blocked"}
	cs := []Counter{
		{Ifindex: 7, Stage: palbpf.StageGeneral, Rule: 0, Packets: 40, Bytes: 4000},
		{Ifindex: 7, Stage: palbpf.StageNormalOut, Rule: 0xa0, Packets: 3, Bytes: 222},
		{Ifindex: 7, Stage: palbpf.StageNormalOut, Rule: 0xa1, Packets: 2, Bytes: 120},
		{Ifindex: 7, Stage: palbpf.StageNormalOut, Rule: 0xb0, Packets: 9, Bytes: 900},
		{Ifindex: 9, Stage: palbpf.StageGeneral, Rule: 3, Packets: 5, Bytes: 300},
	}
	now := uint64(100 * time.Second)
	flows := []Flow{{Iface: web.Name, Proto: 6, A: netip.MustParseAddr("10.65.0.1"), PortA: 8080, B: netip.MustParseAddr("10.65.0.2"), PortB: 40000,
		Opener: "b", Flags: 0x02, Created: uint64(90 * time.Second), LastSeen: uint64(99 * time.Second)}}
	sets := map[string][]string{"s:x": {"10.65.0.2", "fd65::2"}, "n:y": {"10.65.0.1,tcp:8080"}, "0x00000000000000ff": {"10.0.0.0/8"}}
	var b bytes.Buffer
	WritePolicy(&b, web, cs)
	WritePolicy(&b, blocked, cs)
	b.WriteString("---\n")
	WriteCounters(&b, []Interface{web, blocked}, cs)
	b.WriteString("---\n")
	WriteConntrack(&b, flows, now)
	b.WriteString("---\n")
	WriteIPSets(&b, sets)
	golden.Check(t, filepath.Join("testdata", "dumps.golden"), b.String(), *update)
}
