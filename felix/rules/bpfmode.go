package rules

import (
	"fmt"

	"github.com/palisade-net/palisade/felix/calc"
)

// BPFMode renders what the eBPF dataplane keeps in iptables: the nat
// table (masquerade for natOutgoing, as Render writes it) and, in filter,
// a guard that drops packets from workload interfaces that no BPF program
// let through (a program marks what it allows with seenMark), so a new
// workload interface sends nothing before its program is attached. With
// defaultEndpointToHostAction Accept, workload traffic to the host that
// the program let through is accepted, as the iptables dataplane does.
// raw and mangle hold nothing of felix's.
func BPFMode(in Input, seenMark uint32) *Ruleset {
	if in.Config == nil {
		in.Config = calc.MergeConfig(nil, nil)
	}
	full := Render(Input{Config: in.Config, IPVersion: in.IPVersion})
	b := &builder{in: in, tables: map[string][]Chain{"nat": full.Tables["nat"]}}
	cfg := b.in.Config
	var guard []Rule
	for _, p := range cfg.InterfacePrefixes {
		guard = append(guard, Rule{
			Match:   fmt.Sprintf("-i %s%s -m mark --mark 0x0/%#x", p, workloadIfaceSuffix, seenMark),
			Action:  "DROP",
			Comment: "From a workload interface, not let through by its BPF program",
		})
	}
	input := append([]Rule(nil), guard...)
	if cfg.DefaultEndpointToHostAction == "Accept" {
		for _, p := range cfg.InterfacePrefixes {
			input = append(input, Rule{Match: "-i " + p + workloadIfaceSuffix, Action: "ACCEPT", Comment: "Configured DefaultEndpointToHostAction"})
		}
	}
	b.add("filter", ChainFilterInput, input)
	b.add("filter", ChainFilterForward, guard)
	rs := &Ruleset{IPVersion: in.IPVersion, Tables: b.tables}
	for _, j := range full.Jumps {
		if j.Table == "nat" || j.Table == "filter" && (j.Chain == "INPUT" || j.Chain == "FORWARD") {
			rs.Jumps = append(rs.Jumps, j)
		}
	}
	return rs
}
