package policy

import (
	"testing"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// counted reads one counter of the bed, summed over the CPUs.
func (e *bed) counted(ifindex, stage int, id uint64) (packets, bytes uint64) {
	e.t.Helper()
	var per []bpf.CounterValue
	k := bpf.CounterKey{Ifindex: uint32(ifindex), Stage: uint8(stage), Rule: id}
	if err := e.objs.Maps[bpf.MapCounters].Lookup(k, &per); err != nil {
		return 0, 0
	}
	for _, v := range per {
		packets += v.Packets
		bytes += v.Bytes
	}
	return packets, bytes
}

// slotOf finds a program's slot by where it is: policy and rule position,
// or the tier of an end of tier (rule -1).
func slotOf(t *testing.T, p *Program, tier, policy string, rule int) Slot {
	t.Helper()
	for _, s := range p.Slots {
		if s.Tier == tier && s.Policy == policy && s.Rule == rule {
			return s
		}
	}
	t.Fatalf("no slot %s/%s rule %d in %+v", tier, policy, rule, p.Slots)
	return Slot{}
}

func countersInput(port0 uint16) Input {
	tcpTo := func(a calc.Action, port uint16, index int) calc.Rule {
		return calc.Rule{Action: a, Protocol: 6, DstPorts: []calc.PortRange{{Min: port, Max: port}}, Index: index}
	}
	return Input{Final: true, Tiers: []Tier{
		{Name: "t1", DefaultAction: calc.Pass, Policies: []Policy{{ID: calc.PolicyID{Tier: "t1", Name: "q"},
			Rules: []calc.Rule{{Action: calc.Pass, Protocol: 17, Index: 0}}}}},
		{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Namespace: "ns", Name: "p"},
			Rules: []calc.Rule{tcpTo(calc.Allow, port0, 0), tcpTo(calc.Deny, 81, 1)}}}},
	}}
}

// TestRuleCounters sends packets through a stage and checks that exactly
// the deciding rule's counter (packets and bytes) moved, Pass rules
// counting on the way; then the program is rewritten with the first rule
// of policy ns/p changed: as on iptables, where the policy's chain is
// rewritten, every rule of ns/p starts again from zero (under new keys;
// the old counts are never read as the new rules'), while the other
// policy's Pass rule and the end of the tier keep counting. It runs for
// the compiled programs and for the policy engine, whose rule ids are the
// same.
func TestRuleCounters(t *testing.T) {
	for _, engine := range []bool{false, true} {
		name := "compiled"
		if engine {
			name = "engine"
		}
		t.Run(name, func(t *testing.T) { ruleCounters(t, engine) })
	}
}

func ruleCounters(t *testing.T, engine bool) {
	e := newBed(t)
	load := e.load
	if engine {
		load = e.loadEngine
	}
	v1in := countersInput(80)
	v1, err := Compile(v1in)
	if err != nil {
		t.Fatal(err)
	}
	e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: load(v1in)}, "10.0.0.1/32")
	send := func(proto uint8, sport, dport uint16, want int32) int {
		t.Helper()
		pkt := packet{src: "10.0.0.1", dst: "10.0.0.2", proto: proto, sport: sport, dport: dport, tcpFlags: tcpSYN}.bytes()
		if got, _ := e.send(false, bpf.In, e.a, 0, pkt); got != want {
			t.Fatalf("proto %d port %d: verdict %d, want %d", proto, dport, got, want)
		}
		return len(pkt) - 14 // bytes from the IP header on
	}
	allow0, deny1 := slotOf(t, v1, "default", "ns/p", 0), slotOf(t, v1, "default", "ns/p", 1)
	pass, end := slotOf(t, v1, "t1", "q", 0), slotOf(t, v1, "default", "", -1)
	var n int
	for i := range 3 {
		n = send(6, uint16(40000+i), 80, -1)
	}
	for i := range 2 {
		send(6, uint16(41000+i), 81, 2)
	}
	send(6, 42000, 82, 2)
	u := send(17, 43000, 53, 2) // passed by t1, then the end of default
	want := func(s Slot, packets, bytes int) {
		t.Helper()
		p, b := e.counted(e.a, bpf.StageNormalIn, s.ID)
		if p != uint64(packets) || b != uint64(bytes) {
			t.Errorf("%s/%s rule %d (%s): %d packets %d bytes, want %d and %d", s.Tier, s.Policy, s.Rule, s.Action, p, b, packets, bytes)
		}
	}
	want(allow0, 3, 3*n)
	want(deny1, 2, 2*n)
	want(end, 2, n+u)
	want(pass, 1, u)
	if p, _ := e.counted(e.b, bpf.StageNormalIn, allow0.ID); p != 0 {
		t.Errorf("the other interface counted %d packets", p)
	}

	// Rule 0 changes (port 8080); rule 1 does not.
	v2in := countersInput(8080)
	v2, err := Compile(v2in)
	if err != nil {
		t.Fatal(err)
	}
	e.clearCT()
	e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: load(v2in)}, "10.0.0.1/32")
	allow0v2, deny1v2 := slotOf(t, v2, "default", "ns/p", 0), slotOf(t, v2, "default", "ns/p", 1)
	passv2, endv2 := slotOf(t, v2, "t1", "q", 0), slotOf(t, v2, "default", "", -1)
	if allow0v2.ID == allow0.ID || deny1v2.ID == deny1.ID || passv2.ID != pass.ID || endv2.ID != end.ID {
		t.Fatalf("rule ids after the change: ns/p rule 0 %#x→%#x, rule 1 %#x→%#x (want both new), t1/q %#x→%#x, end %#x→%#x (want kept)",
			allow0.ID, allow0v2.ID, deny1.ID, deny1v2.ID, pass.ID, passv2.ID, end.ID, endv2.ID)
	}
	send(6, 41002, 81, 2)
	send(6, 44000, 8080, -1)
	send(6, 44001, 80, 2) // now the end of the tier
	send(17, 43001, 53, 2)
	want(deny1v2, 1, n)
	want(allow0v2, 1, n)
	want(allow0, 3, 3*n) // the old rules' counts stay under their own keys
	want(deny1, 2, 2*n)
	want(passv2, 2, 2*u)
	want(endv2, 4, 2*n+2*u)
}
