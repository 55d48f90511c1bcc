package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func u8(v uint8) *uint8 { return &v }

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func one(action calc.Action, rules ...calc.Rule) Input {
	return Input{Final: true, Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "p"}, Rules: rules}}}}}
}

// probe is a packet through the workload's in stage and its verdict.
type probe struct {
	p     packet
	allow bool
}

func tcp(src, dst string, dport uint16) packet {
	return packet{src: src, dst: dst, proto: 6, sport: 40000, dport: dport, tcpFlags: tcpSYN}
}
func udp(src, dst string, dport uint16) packet {
	return packet{src: src, dst: dst, proto: 17, sport: 40000, dport: dport}
}
func icmp(src, dst string, typ uint8) packet {
	proto := uint8(1)
	if strings.Contains(src, ":") {
		proto = 58
	}
	return packet{src: src, dst: dst, proto: proto, icmpType: typ, sport: 7}
}

// cases are the stages golden-tested, loaded through the verifier and
// run on packets (from 10.0.0.1 or fd00::1 out of the workload).
var cases = []struct {
	name   string
	in     Input
	sets   map[string][]string
	probes []probe
}{
	{name: "deny-all", in: Input{Final: true}, probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 80), false}}},
	{name: "profile-allow", in: Input{Final: true, Profiles: []Profile{{Name: "kns.a", Rules: []calc.Rule{{Action: calc.Allow}}}}},
		probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 80), true}, {udp("fd00::1", "fd00::2", 53), true}}},
	{name: "allow-then-deny", in: one(calc.Allow,
		calc.Rule{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 8080, Max: 8080}}},
		calc.Rule{Action: calc.Deny, Protocol: 6},
		calc.Rule{Action: calc.Allow}),
		probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 8080), true}, {tcp("10.0.0.1", "10.0.0.2", 8081), false}, {udp("10.0.0.1", "10.0.0.2", 8081), true}}},
	{name: "tiers-pass-log", in: Input{Final: true, Tiers: []Tier{
		{Name: "security", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "security", Name: "gate"}, Rules: []calc.Rule{
			{Action: calc.Log, Protocol: 6},
			{Action: calc.Deny, SrcIPSets: []string{"s:bad"}},
			{Action: calc.Pass, Protocol: 6},
		}}}},
		{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "web"}, Rules: []calc.Rule{
			{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 80, Max: 80}}},
		}}}},
		{Name: "baseline", DefaultAction: calc.Pass, Policies: []Policy{{ID: calc.PolicyID{Tier: "baseline", Name: "none"}}}},
	}, Profiles: []Profile{{Name: "kns.a", Rules: []calc.Rule{{Action: calc.Allow}}}}},
		sets:   map[string][]string{"s:bad": {"10.0.0.9"}},
		probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 80), true}, {tcp("10.0.0.1", "10.0.0.2", 81), false}, {udp("10.0.0.1", "10.0.0.2", 80), false}}},
	{name: "nets-notnets", in: one(calc.Allow,
		calc.Rule{Action: calc.Allow, DstNets: pfx("10.1.0.0/16", "fd01::/32"), NotDstNets: pfx("10.1.2.0/24", "fd01:0:2::/48")}),
		probes: []probe{{tcp("10.0.0.1", "10.1.1.1", 80), true}, {tcp("10.0.0.1", "10.1.2.1", 80), false}, {tcp("10.0.0.1", "10.2.0.1", 80), false},
			{tcp("fd00::1", "fd01:0:1::1", 80), true}, {tcp("fd00::1", "fd01:0:2::1", 80), false}, {tcp("fd00::1", "fd02::1", 80), false}}},
	{name: "ports-ranges-named", in: one(calc.Allow,
		calc.Rule{Action: calc.Allow, Protocol: 17, DstPorts: []calc.PortRange{{Min: 53, Max: 53}, {Min: 9000, Max: 9100}}, DstNamedPortIPSets: []string{"n:dns"}},
		calc.Rule{Action: calc.Allow, Protocol: 6, NotDstPorts: []calc.PortRange{{Min: 1, Max: 1023}}, NotSrcPorts: []calc.PortRange{{Min: 40001, Max: 40001}}}),
		sets: map[string][]string{"n:dns": {"10.0.0.2,udp:5353"}},
		probes: []probe{{udp("10.0.0.1", "10.0.0.2", 53), true}, {udp("10.0.0.1", "10.0.0.2", 9050), true}, {udp("10.0.0.1", "10.0.0.2", 9101), false},
			{udp("10.0.0.1", "10.0.0.2", 5353), true}, {udp("10.0.0.1", "10.0.0.3", 5353), false},
			{tcp("10.0.0.1", "10.0.0.2", 80), false}, {tcp("10.0.0.1", "10.0.0.2", 8080), true}}},
	{name: "icmp-protocols", in: one(calc.Allow,
		calc.Rule{Action: calc.Allow, IPVersion: 4, Protocol: 1, ICMPType: u8(8), ICMPCode: u8(0)},
		calc.Rule{Action: calc.Allow, IPVersion: 6, Protocol: 58, NotICMPType: u8(128)},
		calc.Rule{Action: calc.Allow, NotProtocol: 17, Protocol: 132}),
		probes: []probe{{icmp("10.0.0.1", "10.0.0.2", 8), true}, {icmp("10.0.0.1", "10.0.0.2", 13), false},
			{icmp("fd00::1", "fd00::2", 128), false}, {icmp("fd00::1", "fd00::2", 129), true},
			{packet{src: "10.0.0.1", dst: "10.0.0.2", proto: 132, sport: 1, dport: 2}, true}, {udp("10.0.0.1", "10.0.0.2", 2), false}}},
	{name: "sets-notsets", in: one(calc.Allow,
		calc.Rule{Action: calc.Allow, DstIPSets: []string{"s:web", "s:prod"}, NotDstIPSets: []string{"s:quarantine"}, SrcIPSets: []string{"s:clients"}}),
		sets: map[string][]string{"s:web": {"10.0.0.2", "10.0.0.3", "fd00::2"}, "s:prod": {"10.0.0.0/24", "fd00::/64"}, "s:quarantine": {"10.0.0.3"},
			"s:clients": {"10.0.0.1", "fd00::1"}},
		probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 80), true}, {tcp("10.0.0.1", "10.0.0.3", 80), false}, {tcp("10.0.0.1", "10.0.1.2", 80), false},
			{tcp("fd00::1", "fd00::2", 80), true}, {tcp("fd00::1", "fd00::3", 80), false}}},
	// Guards: the first policy's sixteen TCP rules (ports 1000–1015, one
	// Pass to the next tier among them) are jumped over by a packet of
	// another protocol or port; the second policy's rules, of several
	// protocols and one with no port, get no guard.
	{name: "guarded-groups", in: Input{Final: true, Tiers: []Tier{
		{Name: "t1", DefaultAction: calc.Deny, Policies: []Policy{
			{ID: calc.PolicyID{Tier: "t1", Name: "tcp"}, Rules: tcpPorts(1000, 16, 1007)},
			{ID: calc.PolicyID{Tier: "t1", Name: "mixed"}, Rules: []calc.Rule{
				{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 1016, Max: 1016}}},
				{Action: calc.Allow, Protocol: 17, DstPorts: []calc.PortRange{{Min: 53, Max: 53}}},
				{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 2000, Max: 2010}}},
				{Action: calc.Allow, Protocol: 1}}}}},
		{Name: "t2", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "t2", Name: "passed"}, Rules: []calc.Rule{
			{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 1007, Max: 1007}}}}}}}}},
		probes: []probe{{tcp("10.0.0.1", "10.0.0.2", 1000), true}, {tcp("10.0.0.1", "10.0.0.2", 1015), true}, {tcp("10.0.0.1", "10.0.0.2", 999), false},
			{tcp("10.0.0.1", "10.0.0.2", 1007), true}, {udp("10.0.0.1", "10.0.0.2", 1005), false}, {tcp("10.0.0.1", "10.0.0.2", 1016), true},
			{udp("10.0.0.1", "10.0.0.2", 53), true}, {tcp("10.0.0.1", "10.0.0.2", 53), false}, {tcp("10.0.0.1", "10.0.0.2", 2010), true},
			{tcp("10.0.0.1", "10.0.0.2", 2011), false}, {icmp("10.0.0.1", "10.0.0.2", 8), true}}},
	{name: "untracked-no-decision", in: Input{Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "u"}, Rules: []calc.Rule{
		{Action: calc.Allow, Protocol: 17, DstPorts: []calc.PortRange{{Min: 8080, Max: 8080}}}}}}}}}},
}

func listing(p *Program) string {
	var b strings.Builder
	for _, s := range p.Slots {
		fmt.Fprintf(&b, "slot %d: id=%#016x tier=%q policy=%q profile=%q rule=%d index=%d %s: %s\n", s.Slot, s.ID, s.Tier, s.Policy, s.Profile, s.Rule, s.Index, s.Action, s.Match)
	}
	fmt.Fprintf(&b, "\n%v", p.Insns)
	return b.String()
}

// TestGolden compares each stage's program with its golden listing.
func TestGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.in)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := Compile(c.in)
			if again.Hash != p.Hash {
				t.Errorf("two compilations differ")
			}
			golden.Check(t, filepath.Join("testdata", c.name+".golden"), listing(p), *update)
		})
	}
}

// TestPrograms loads every case through the verifier and runs packets
// out of a workload through the entry program, the stage and the resume
// program with BPF_PROG_TEST_RUN.
func TestPrograms(t *testing.T) {
	e := newBed(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			slot := e.load(c.in)
			for set, ms := range c.sets {
				for _, m := range ms {
					e.memberOf(set, m)
				}
			}
			e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: slot}, "10.0.0.1/32", "fd00::1/128")
			for _, pr := range c.probes {
				got, _ := e.send(false, bpf.In, e.a, 0, pr.p.bytes())
				if want := verdict(pr.allow); got != want {
					t.Errorf("%s: verdict %d, want %d", pr.p, got, want)
				}
			}
			e.clearCT()
		})
	}
}

func verdict(allow bool) int32 {
	if allow {
		return -1
	}
	return 2
}

// TestLargePrograms loads stages of 100 and 1,000 rules (with sets, nets
// and ports each) through the verifier: the packet matching the last rule
// walks all of them.
func TestLargePrograms(t *testing.T) {
	e := newBed(t)
	for _, n := range []int{100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			in := manyRules(n)
			e.memberOf("s:many", "10.0.0.2")
			slot := e.load(in)
			e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: slot}, "10.0.0.1/32")
			last := uint16(10000 + n - 1)
			if got, _ := e.send(false, bpf.In, e.a, 0, tcp("10.0.0.1", "10.0.0.2", last).bytes()); got != -1 {
				t.Errorf("last rule's port: verdict %d", got)
			}
			if got, _ := e.send(false, bpf.In, e.a, 0, tcp("10.0.0.1", "10.0.0.2", last+1).bytes()); got != 2 {
				t.Errorf("no rule's port: verdict %d", got)
			}
			// Inside guarded groups: a middle rule's port, and the same
			// port in UDP (no rule's protocol) or to an address outside
			// the set.
			mid := uint16(10000 + n/2 + 3)
			if got, _ := e.send(false, bpf.In, e.a, 0, tcp("10.0.0.1", "10.0.0.2", mid).bytes()); got != -1 {
				t.Errorf("a middle rule's port: verdict %d", got)
			}
			if got, _ := e.send(false, bpf.In, e.a, 0, udp("10.0.0.1", "10.0.0.2", mid).bytes()); got != 2 {
				t.Errorf("UDP to a middle rule's port: verdict %d", got)
			}
			if got, _ := e.send(false, bpf.In, e.a, 0, tcp("10.0.0.1", "10.0.0.3", mid).bytes()); got != 2 {
				t.Errorf("a middle rule's port, not to a set member: verdict %d", got)
			}
			e.clearCT()
		})
	}
}

// tcpPorts is n rules allowing one TCP port each from first on; the one
// of port pass is a Pass instead.
func tcpPorts(first uint16, n int, pass uint16) []calc.Rule {
	var rs []calc.Rule
	for i := range n {
		p := first + uint16(i)
		a := calc.Allow
		if p == pass {
			a = calc.Pass
		}
		rs = append(rs, calc.Rule{Action: a, Protocol: 6, DstPorts: []calc.PortRange{{Min: p, Max: p}}, Index: i})
	}
	return rs
}

// manyRules is a stage of n rules, each allowing one TCP port to a set
// member in 10.0.0.0/8.
func manyRules(n int) Input {
	var rules []calc.Rule
	for i := range n {
		port := uint16(10000 + i)
		rules = append(rules, calc.Rule{Action: calc.Allow, Protocol: 6, DstNets: pfx("10.0.0.0/8"), DstIPSets: []string{"s:many"},
			DstPorts: []calc.PortRange{{Min: port, Max: port}}})
	}
	return Input{Final: true, Tiers: []Tier{{Name: "default", DefaultAction: calc.Deny, Policies: []Policy{{ID: calc.PolicyID{Tier: "default", Name: "many"}, Rules: rules}}}}}
}

// TestRuleIDFormat: RuleID hashes the same bytes as the fmt form it
// replaced, so counters keep their keys across the change.
func TestRuleIDFormat(t *testing.T) {
	old := func(s Slot, owner string) uint64 {
		h := sha256.New()
		fmt.Fprintf(h, "tier=%q policy=%q profile=%q index=%d action=%q match=%q owner=%s\n", s.Tier, s.Policy, s.Profile, s.Index, s.Action, s.Match, owner)
		return binary.BigEndian.Uint64(h.Sum(nil)[:8])
	}
	for _, s := range []Slot{
		{Tier: "default", Policy: "ns/default.p", Index: 3, Action: "Allow", Match: `tcp to ports 80 "x"`},
		{Profile: "kns.a\tb", Index: -1, Action: "Deny", Match: "end of tier ü\x00\xff"},
		{},
	} {
		for _, owner := range []string{"", "0123abcd", "ü"} {
			if a, b := RuleID(s, owner), old(s, owner); a != b {
				t.Errorf("%+v owner %q: %#x, the fmt form %#x", s, owner, a, b)
			}
		}
	}
}
