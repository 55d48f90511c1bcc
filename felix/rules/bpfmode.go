package rules

import (
	"fmt"

	"github.com/palisade-net/palisade/felix/calc"
)

// BPFMode renders what the eBPF dataplane keeps in iptables: the nat
// table (masquerade for natOutgoing, as Render writes it) and, in filter,
// guards that close a new workload interface until its BPF programs are
// attached: packets from a workload interface that no program let through
// (a program marks what it allows with seenMark) are dropped, and so are
// packets forwarded to one whose device group is not attachedGroup (felix
// sets it once both hooks are attached; the CNI plugin's route to the pod
// is there before). With defaultEndpointToHostAction Accept, workload
// traffic to the host that the program let through is accepted, as the
// iptables dataplane does. VXLAN from hosts that are not nodes and from
// workloads is dropped as Render drops it, and so are forwarded packets to
// advertised service ranges (serviceLoopPrevention, cali-cidr-block). raw
// and mangle hold nothing of felix's.
func BPFMode(in Input, seenMark, attachedGroup uint32) *Ruleset {
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
	// VXLAN from hosts that are not nodes, and from workloads, is
	// dropped as the iptables dataplane does (vxlanInput,
	// workloadEncapDrop).
	var encap []Rule
	for _, p := range cfg.InterfacePrefixes {
		encap = append(encap, workloadEncapDrop(cfg, "-i "+p+workloadIfaceSuffix+" ")...)
	}
	input := append(vxlanInput(cfg, in.IPVersion), guard...)
	input = append(input, encap...)
	if cfg.DefaultEndpointToHostAction == "Accept" {
		for _, p := range cfg.InterfacePrefixes {
			input = append(input, Rule{Match: "-i " + p + workloadIfaceSuffix, Action: "ACCEPT", Comment: "Configured DefaultEndpointToHostAction"})
		}
	}
	b.add("filter", ChainFilterInput, input)
	forward := append(append([]Rule(nil), guard...), encap...)
	forward = append(forward, Rule{Action: ChainCIDRBlock})
	for _, p := range cfg.InterfacePrefixes {
		forward = append(forward, Rule{
			Match:   fmt.Sprintf("-o %s%s -m devgroup ! --dst-group %#x", p, workloadIfaceSuffix, attachedGroup),
			Action:  "DROP",
			Comment: "To a workload interface whose BPF programs are not attached yet",
		})
	}
	b.add("filter", ChainFilterForward, forward)
	b.add("filter", ChainCIDRBlock, cidrBlockRules(cfg, in.IPVersion))
	rs := &Ruleset{IPVersion: in.IPVersion, Tables: b.tables}
	for _, j := range full.Jumps {
		if j.Table == "nat" || j.Table == "filter" && (j.Chain == "INPUT" || j.Chain == "FORWARD") {
			rs.Jumps = append(rs.Jumps, j)
		}
	}
	return rs
}
