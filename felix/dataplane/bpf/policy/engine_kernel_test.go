package policy

import (
	"testing"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// TestEngineHostStages: a host endpoint's ingress runs up to three stages
// in one walk (doNotTrack, preDNAT, then normal or forward), which the
// engine decides in place one after the other. The same stages compiled
// into programs (interface a) and for the engine (interface b) must give
// each packet the same verdict, and the ones whose fate does not hang on
// the host's routes their expected one.
func TestEngineHostStages(t *testing.T) {
	e := newBed(t)
	tcpTo := func(a calc.Action, port uint16) calc.Rule {
		return calc.Rule{Action: a, Protocol: 6, DstPorts: []calc.PortRange{{Min: port, Max: port}}}
	}
	pol := func(final bool, rules ...calc.Rule) Input {
		for i := range rules {
			rules[i].Index = i
		}
		return Input{Final: final, Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny,
			Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "host"}, Rules: rules}}}}}
	}
	untracked := pol(false, tcpTo(calc.Deny, 23), tcpTo(calc.Allow, 24))
	prednat := pol(false, tcpTo(calc.Deny, 25), calc.Rule{Action: calc.Allow, Protocol: 17})
	normal := pol(true, tcpTo(calc.Allow, 80), tcpTo(calc.Deny, 81))
	for _, c := range []struct {
		ifindex int
		load    func(Input) uint32
	}{{e.a, e.load}, {e.b, e.loadEngine}} {
		e.endpoint(c.ifindex, bpf.EndpointHost, map[int]uint32{
			bpf.StageUntrackedIn: c.load(untracked), bpf.StagePreDNATIn: c.load(prednat),
			bpf.StageNormalIn: c.load(normal), bpf.StageForwardIn: c.load(normal)})
	}
	const drop, allow = 2, -1
	for _, p := range []struct {
		pkt  packet
		want int32 // 0: whatever the compiled stages say (it hangs on the routes)
	}{
		{tcp("198.18.0.1", "198.18.0.2", 23), drop},  // doNotTrack Deny
		{tcp("198.18.0.1", "198.18.0.2", 25), drop},  // preDNAT Deny
		{tcp("198.18.0.1", "198.18.0.2", 81), drop},  // normal or forward Deny
		{tcp("198.18.0.1", "198.18.0.2", 82), drop},  // the end of the tier
		{tcp("198.18.0.1", "198.18.0.2", 80), allow}, // three stages, the last allows
		{tcp("198.18.0.1", "198.18.0.2", 24), allow}, // doNotTrack Allow
		{udp("198.18.0.1", "198.18.0.2", 53), 0},
	} {
		e.clearCT()
		compiled, _ := e.send(true, bpf.In, e.a, 0, p.pkt.bytes())
		e.clearCT()
		engine, _ := e.send(true, bpf.In, e.b, 0, p.pkt.bytes())
		if engine != compiled || (p.want != 0 && engine != p.want) {
			t.Errorf("%s: the engine %d, compiled %d, want %d", p.pkt, engine, compiled, p.want)
		}
	}
}
