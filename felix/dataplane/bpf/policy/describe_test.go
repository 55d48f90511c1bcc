package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// anyRule is a rule with every field of calc.Rule drawn at random:
// nil, empty and full lists, strings that need JSON escapes.
func anyRule(rng *rand.Rand) calc.Rule {
	strs := func() []string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := []string{"s:abc", "n:x<y>&z", "quote\"\\", "ü\x00\xff", "tab\t"}[:1+rng.IntN(4)]
		return append([]string(nil), out...)
	}
	nets := func() []netip.Prefix {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []netip.Prefix{}
		}
		return []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64"), {}}[:1+rng.IntN(3)]
	}
	ports := func() []calc.PortRange {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []calc.PortRange{}
		}
		return []calc.PortRange{{Min: 80, Max: 80}, {Min: 1000, Max: 2000}}[:1+rng.IntN(2)]
	}
	u8 := func() *uint8 {
		if rng.IntN(2) == 0 {
			return nil
		}
		v := uint8(rng.IntN(256))
		return &v
	}
	return calc.Rule{Action: []calc.Action{calc.Allow, calc.Deny, calc.Pass, calc.Log, "x<y"}[rng.IntN(5)], IPVersion: rng.IntN(2) * 4,
		Protocol: uint8(rng.IntN(3)), NotProtocol: uint8(rng.IntN(3)),
		SrcNets: nets(), NotSrcNets: nets(), DstNets: nets(), NotDstNets: nets(),
		SrcIPSets: strs(), NotSrcIPSets: strs(), DstIPSets: strs(), NotDstIPSets: strs(),
		SrcPorts: ports(), NotSrcPorts: ports(), DstPorts: ports(), NotDstPorts: ports(),
		SrcNamedPortIPSets: strs(), NotSrcNamedPortIPSets: strs(), DstNamedPortIPSets: strs(), NotDstNamedPortIPSets: strs(),
		ICMPType: u8(), ICMPCode: u8(), NotICMPType: u8(), NotICMPCode: u8(), Index: rng.IntN(100) - 1,
		Name: []string{"", "web", "a&b"}[rng.IntN(3)]}
}

// TestRulesJSON: RulesDigest hashes json.Marshal's bytes, so rule ids
// (counters' keys) stay what they were; json.Marshal writes every field
// of calc.Rule, so a field the appender forgets fails here.
func TestRulesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, rules := range [][]calc.Rule{nil, {}, {{}}} {
		want, _ := json.Marshal(rules)
		if got := rulesJSON(rules); got != string(want) {
			t.Fatalf("%#v:\n%s\njson.Marshal:\n%s", rules, got, want)
		}
	}
	for range 2000 {
		rules := make([]calc.Rule, 1+rng.IntN(3))
		for i := range rules {
			rules[i] = anyRule(rng)
		}
		want, _ := json.Marshal(rules)
		if got := rulesJSON(rules); got != string(want) {
			t.Fatalf("%#v:\n%s\njson.Marshal:\n%s", rules, got, want)
		}
	}
}

func rulesJSON(rules []calc.Rule) string {
	var b strings.Builder
	writeRulesJSON(&b, rules)
	return b.String()
}

// TestDescribeFormat: Describe writes what its fmt form wrote (the
// match is part of a rule's id).
func TestDescribeFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		r := anyRule(rng)
		if i == 0 {
			r = calc.Rule{}
		}
		if got, want := Describe(r), describeFmt(r); got != want {
			t.Fatalf("%#v:\n%q\nfmt: %q", r, got, want)
		}
	}
}

// describeFmt is Describe as it was written with fmt: the reference.
func describeFmt(r calc.Rule) string {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	if r.IPVersion != 0 {
		add("ipv%d", r.IPVersion)
	}
	if r.Protocol != 0 {
		add("proto %d", r.Protocol)
	}
	if r.NotProtocol != 0 {
		add("!proto %d", r.NotProtocol)
	}
	list := func(name string, v any, n int) {
		if n > 0 {
			add("%s %v", name, v)
		}
	}
	list("src", r.SrcNets, len(r.SrcNets))
	list("!src", r.NotSrcNets, len(r.NotSrcNets))
	list("dst", r.DstNets, len(r.DstNets))
	list("!dst", r.NotDstNets, len(r.NotDstNets))
	list("src-sets", r.SrcIPSets, len(r.SrcIPSets))
	list("!src-sets", r.NotSrcIPSets, len(r.NotSrcIPSets))
	list("dst-sets", r.DstIPSets, len(r.DstIPSets))
	list("!dst-sets", r.NotDstIPSets, len(r.NotDstIPSets))
	ports := func(ps []calc.PortRange) string {
		var s []string
		for _, p := range ps {
			if p.Min == p.Max {
				s = append(s, fmt.Sprint(p.Min))
			} else {
				s = append(s, fmt.Sprintf("%d:%d", p.Min, p.Max))
			}
		}
		return strings.Join(s, ",")
	}
	list("sport", ports(r.SrcPorts), len(r.SrcPorts))
	list("!sport", ports(r.NotSrcPorts), len(r.NotSrcPorts))
	list("dport", ports(r.DstPorts), len(r.DstPorts))
	list("!dport", ports(r.NotDstPorts), len(r.NotDstPorts))
	list("sport-sets", r.SrcNamedPortIPSets, len(r.SrcNamedPortIPSets))
	list("!sport-sets", r.NotSrcNamedPortIPSets, len(r.NotSrcNamedPortIPSets))
	list("dport-sets", r.DstNamedPortIPSets, len(r.DstNamedPortIPSets))
	list("!dport-sets", r.NotDstNamedPortIPSets, len(r.NotDstNamedPortIPSets))
	icmp := func(name string, t, c *uint8) {
		if t == nil {
			return
		}
		if c != nil {
			add("%s %d/%d", name, *t, *c)
		} else {
			add("%s %d", name, *t)
		}
	}
	icmp("icmp", r.ICMPType, r.ICMPCode)
	icmp("!icmp", r.NotICMPType, r.NotICMPCode)
	if len(parts) == 0 {
		return "any"
	}
	return strings.Join(parts, " ")
}
