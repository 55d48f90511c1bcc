package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestFelixUsesEngine: felix lays an endpoint's policy stages out for the
// policy engine — each stage's slot holds an engine stub bound to its
// stage in pal_pol, not a program of instructions — and the engine
// decides the pod's packets, following a selector set's members as they
// move. featureDetectOverride BPFLoop=false (a kernel without bpf_loop)
// compiles the same stages into instructions, with the same verdicts
// and the engine's slot words emptied; dropping the override lays them
// out for the engine again; a stage the engine does not take
// (ErrNotEngine) is compiled beside the engine's. Should the engine
// fail, its stages drop until they are compiled.
func TestFelixUsesEngine(t *testing.T) {
	td := newTestDriver(t)
	d := td.d
	configure := func(override string) {
		t.Helper()
		off := false
		d.OnConfigUpdate(calc.MergeConfig(&v3.FelixConfigurationSpec{IPv6Support: &off, FeatureDetectOverride: override}, nil))
		applySettled(t, d)
	}
	if err := nstest.Sysctl(td.run, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	// A client pod beside the test driver's.
	cliNS := nstest.New(t, nstest.Prefix(), "cli")
	cliH, cliHandle := nstest.Handle(t, cliNS)
	client := netip.MustParseAddr("10.80.0.10")
	if err := nstest.Workload(td.nodeH, cliH, cliHandle, "calitst5", client); err != nil {
		t.Fatal(err)
	}
	cliRun := nstest.Runner(t, cliNS)
	d.OnEndpointUpdate(&calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "cli"}, InterfaceName: "calitst5",
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(client, 32)}, Profiles: []string{"kns.a"}})
	d.OnRouteUpdate(calc.Route{Dst: netip.PrefixFrom(client, 32), Iface: "calitst5"})
	const iface, set = "calitst4", "s:engine-test-clients"
	addr := netip.MustParseAddr("10.80.0.9")
	_, idx := td.workload(t, iface, addr)
	srv, err := nstest.Serve(nstest.Runner(t, td.pod), 8080, 8081)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	d.OnIPSetUpdate(&calc.IPSet{ID: set, Type: calc.IPSetNet, Members: []string{client.String() + "/32"}})
	pid := calc.PolicyID{Tier: "default", Namespace: "a", Name: "web"}
	d.OnPolicyUpdate(&calc.Policy{ID: pid, Ingress: true, Inbound: []calc.Rule{
		{Action: calc.Deny, Protocol: 6, DstPorts: []calc.PortRange{{Min: 8081, Max: 8081}}},
		{Action: calc.Allow, Protocol: 6, SrcIPSets: []string{set}, DstPorts: []calc.PortRange{{Min: 8080, Max: 8081}}, Index: 1},
		{Action: calc.Allow, Protocol: 1, Index: 2},
	}})
	ep := &calc.Endpoint{ID: calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "a", Name: "w"}, InterfaceName: iface,
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(addr, 32)}, Profiles: []string{"kns.a"},
		Tiers: []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{pid}}}}
	d.OnEndpointUpdate(ep)
	d.OnRouteUpdate(calc.Route{Dst: netip.PrefixFrom(addr, 32), Iface: iface})
	configure("")

	// stages checks what runs each of the interface's stages.
	stages := func(when string, engine bool) {
		t.Helper()
		var ent palbpf.Endpoint
		if err := d.objs.Maps[palbpf.MapEndpoint].Lookup(uint32(idx), &ent); err != nil {
			t.Fatalf("%s: the interface's entry: %v", when, err)
		}
		n := 0
		for st, slot := range ent.Slots {
			if slot == 0 {
				continue
			}
			n++
			p := d.progs.bySlot[slot]
			if p == nil {
				t.Fatalf("%s: stage %d's slot %d holds no program of felix's", when, st, slot)
			}
			var id uint32
			if err := d.objs.Maps[palbpf.MapProgs].Lookup(slot, &id); err != nil {
				t.Fatalf("%s: slot %d: %v", when, slot, err)
			}
			info, err := p.prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			if pid, _ := info.ID(); ebpf.ProgramID(id) != pid {
				t.Errorf("%s: slot %d runs program %d, felix's is %d", when, slot, id, pid)
			}
			bound := d.progs.mem.Load32(2*4096 + slot) // the slot's word (policy.memSlots)
			if engine && (p.stage == nil || !p.desc.Engine || bound == 0) {
				t.Errorf("%s: stage %d (slot %d) is not an engine stage: stage %v, stub %v, bound to %#x", when, st, slot, p.stage != nil, p.desc.Engine, bound)
			}
			if !engine && (p.stage != nil || p.desc.Engine || bound != 0) {
				t.Errorf("%s: stage %d (slot %d) is not compiled: stage %v, stub %v, bound to %#x", when, st, slot, p.stage != nil, p.desc.Engine, bound)
			}
		}
		if n < 2 {
			t.Fatalf("%s: %d stages on the interface, want both directions", when, n)
		}
	}
	verdicts := func(when string, member bool) {
		t.Helper()
		if _, err := nstest.TCP(cliRun, addr, 8080); (err == nil) != member {
			t.Errorf("%s: to port 8080 (allowed from the set's members; the client one: %v): %v", when, member, err)
		}
		if _, err := nstest.TCP(cliRun, addr, 8081); err == nil {
			t.Errorf("%s: to port 8081 (denied) went through", when)
		}
		if err := nstest.ICMP(cliRun, addr, 8, 0); err != nil {
			t.Errorf("%s: ping (allowed): %v", when, err)
		}
	}
	stages("engine", true)
	verdicts("engine", true)
	d.OnIPSetDelta(set, nil, []string{client.String() + "/32"})
	applySettled(t, d)
	verdicts("engine, the client out of the set", false)
	d.OnIPSetDelta(set, []string{client.String() + "/32"}, nil)
	applySettled(t, d)
	verdicts("engine, the client back in the set", true)

	configure("BPFLoop=false")
	stages("BPFLoop=false", false)
	verdicts("BPFLoop=false", true)
	configure("")
	stages("engine again", true)
	verdicts("engine again", true)

	// A stage the engine does not take (a rule of more than 8 named-port
	// exclusions, each a check after the classes: ErrNotEngine) is
	// compiled; the endpoint's other stage stays the engine's.
	named := calc.Rule{Action: calc.Deny, Protocol: 6, Index: 3}
	for i := range 9 {
		named.NotDstNamedPortIPSets = append(named.NotDstNamedPortIPSets, fmt.Sprintf("n:engine-test-%d", i))
	}
	d.OnPolicyUpdate(&calc.Policy{ID: pid, Ingress: true, Inbound: append(slices.Clone(d.policies[pid].Inbound), named)})
	applySettled(t, d)
	var ent palbpf.Endpoint
	if err := d.objs.Maps[palbpf.MapEndpoint].Lookup(uint32(idx), &ent); err != nil {
		t.Fatal(err)
	}
	compiled, engine := 0, 0
	for _, slot := range ent.Slots {
		if p := d.progs.bySlot[slot]; p != nil {
			web := slices.ContainsFunc(p.desc.Slots, func(s policy.Slot) bool { return s.Name == "web" })
			switch {
			case web && p.stage == nil && !p.desc.Engine:
				compiled++
			case !web && p.stage != nil:
				engine++
			default:
				t.Errorf("ErrNotEngine: slot %d (web's policy: %v) has stage %v, stub %v", slot, web, p.stage != nil, p.desc.Engine)
			}
		}
	}
	if compiled != 1 || engine != 1 {
		t.Errorf("ErrNotEngine: %d stages compiled, %d the engine's; want web's policy's compiled, the other the engine's", compiled, engine)
	}
	verdicts("a stage compiled for ErrNotEngine", true)

	// The engine failing to follow the sets (Apply calls this when its
	// Sync fails) unbinds its stages: their stubs drop everything until
	// the same apply has compiled the stages into instructions.
	d.progs.engineFailed(errors.New("the test's"))
	if _, err := nstest.TCP(cliRun, addr, 8080); err == nil {
		t.Error("the engine failed: a stage's stub let a packet through")
	}
	d.stagesDirty = true
	applySettled(t, d)
	stages("after the engine failed", false)
	verdicts("after the engine failed", true)
}
