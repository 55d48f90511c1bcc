// Package policy compiles one stage of an endpoint's Calico policy (its
// tiers, policies and profiles, each a list of calc rules) into a BPF
// program with cilium/ebpf's assembler. The program reads the packet from
// the per-CPU state the entry program filled, walks the rules in Calico's
// order, leaves its verdict and the counter slot of what decided in the
// state, and tail-calls the resume program the state names. It is pure:
// the same input always gives the same instructions (map references by
// name, resolved at load), so a program is known by its hash.
package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/cilium/ebpf/asm"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// Input is one stage of one endpoint.
type Input struct {
	// Tiers in order; each holds the policies of the stage's direction
	// that exist, in order. A tier that lists only absent policies still
	// ends in its default action.
	Tiers []Tier
	// Profiles apply after the tiers (when every tier passed, or none had
	// a policy); only when Final.
	Profiles []Profile
	// Final stages (normal and forward policy) end in Deny; the others
	// (doNotTrack, preDNAT) end with no decision, and the walk goes on.
	Final bool
}

// Tier is a tier's policies for the stage.
type Tier struct {
	Name          string
	DefaultAction calc.Action
	Policies      []Policy
}

// Policy is one policy's rules for the stage's direction.
type Policy struct {
	ID    calc.PolicyID
	Rules []calc.Rule
}

// Profile is one profile's rules for the stage's direction.
type Profile struct {
	Name  string
	Rules []calc.Rule
}

// Slot is one counter slot: a rule, or an implicit end (package bpf
// holds it, with Description, for the readers of a loaded program).
type Slot = bpf.Slot

// RuleID is a slot's identity, the key its packets are counted under:
// the first 8 bytes of a SHA-256 of where the rule is (tier, policy or
// profile, its index) and of owner, the digest of every rule its policy
// or profile has in the stage's direction (RulesDigest; empty for an
// implicit end). So the counters restart as the iptables dataplane's do:
// a policy whose rules of a direction changed in any way (its chain
// rewritten, on iptables) counts all of those rules from zero under new
// keys, while the other policies of the program, and an end of tier,
// keep counting; a count is never read as another rule's.
func RuleID(s Slot, owner string) uint64 {
	// The bytes of
	//   fmt.Sprintf("tier=%q policy=%q profile=%q index=%d action=%q match=%q owner=%s\n", …)
	// (%q is strconv.Quote), appended without fmt: a stage of 10,000
	// rules took 25 ms in Fprintf.
	b := make([]byte, 0, 128+len(s.Match)+len(owner))
	b = strconv.AppendQuote(append(b, "tier="...), s.Tier)
	b = strconv.AppendQuote(append(b, " policy="...), s.Policy)
	b = strconv.AppendQuote(append(b, " profile="...), s.Profile)
	b = strconv.AppendInt(append(b, " index="...), int64(s.Index), 10)
	b = strconv.AppendQuote(append(b, " action="...), s.Action)
	b = strconv.AppendQuote(append(b, " match="...), s.Match)
	b = append(append(append(b, " owner="...), owner...), '\n')
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// RulesDigest is the digest of a policy's or profile's rules of one
// direction, as RuleID takes it: a SHA-256 of their JSON (json.Marshal's
// bytes, appended without reflection: encoding a stage of 10,000 rules
// with json.Marshal took a fifth of its build).
func RulesDigest(rules []calc.Rule) string {
	h := sha256.New()
	writeRulesJSON(h, rules)
	return hex.EncodeToString(h.Sum(nil))
}

// writeRulesJSON writes json.Marshal(rules) to w, a rule at a time;
// TestRulesJSON keeps the two equal, calc.Rule's fields included.
func writeRulesJSON(w io.Writer, rules []calc.Rule) {
	if rules == nil {
		_, _ = w.Write([]byte("null"))
		return
	}
	b := make([]byte, 0, 1024)
	for i := range rules {
		b = append(b[:0], ',')
		if i == 0 {
			b[0] = '['
		}
		r := &rules[i]
		b = appendJSONString(append(b, `{"Action":`...), string(r.Action))
		b = strconv.AppendInt(append(b, `,"IPVersion":`...), int64(r.IPVersion), 10)
		b = strconv.AppendUint(append(b, `,"Protocol":`...), uint64(r.Protocol), 10)
		b = strconv.AppendUint(append(b, `,"NotProtocol":`...), uint64(r.NotProtocol), 10)
		b = appendJSONPrefixes(append(b, `,"SrcNets":`...), r.SrcNets)
		b = appendJSONPrefixes(append(b, `,"NotSrcNets":`...), r.NotSrcNets)
		b = appendJSONPrefixes(append(b, `,"DstNets":`...), r.DstNets)
		b = appendJSONPrefixes(append(b, `,"NotDstNets":`...), r.NotDstNets)
		b = appendJSONStrings(append(b, `,"SrcIPSets":`...), r.SrcIPSets)
		b = appendJSONStrings(append(b, `,"NotSrcIPSets":`...), r.NotSrcIPSets)
		b = appendJSONStrings(append(b, `,"DstIPSets":`...), r.DstIPSets)
		b = appendJSONStrings(append(b, `,"NotDstIPSets":`...), r.NotDstIPSets)
		b = appendJSONPorts(append(b, `,"SrcPorts":`...), r.SrcPorts)
		b = appendJSONPorts(append(b, `,"NotSrcPorts":`...), r.NotSrcPorts)
		b = appendJSONPorts(append(b, `,"DstPorts":`...), r.DstPorts)
		b = appendJSONPorts(append(b, `,"NotDstPorts":`...), r.NotDstPorts)
		b = appendJSONStrings(append(b, `,"SrcNamedPortIPSets":`...), r.SrcNamedPortIPSets)
		b = appendJSONStrings(append(b, `,"NotSrcNamedPortIPSets":`...), r.NotSrcNamedPortIPSets)
		b = appendJSONStrings(append(b, `,"DstNamedPortIPSets":`...), r.DstNamedPortIPSets)
		b = appendJSONStrings(append(b, `,"NotDstNamedPortIPSets":`...), r.NotDstNamedPortIPSets)
		b = appendJSONUint8(append(b, `,"ICMPType":`...), r.ICMPType)
		b = appendJSONUint8(append(b, `,"ICMPCode":`...), r.ICMPCode)
		b = appendJSONUint8(append(b, `,"NotICMPType":`...), r.NotICMPType)
		b = appendJSONUint8(append(b, `,"NotICMPCode":`...), r.NotICMPCode)
		b = strconv.AppendInt(append(b, `,"Index":`...), int64(r.Index), 10)
		b = append(appendJSONString(append(b, `,"Name":`...), r.Name), '}')
		_, _ = w.Write(b)
	}
	if len(rules) == 0 {
		_, _ = w.Write([]byte("["))
	}
	_, _ = w.Write([]byte("]"))
}

// appendJSONString quotes s as json.Marshal does: plain printable ASCII
// directly, anything else (escapes, HTML characters, UTF-8) by it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendJSONList appends a list as json.Marshal does (nil: null), each
// element by one.
func appendJSONList[T any](b []byte, xs []T, one func([]byte, T) []byte) []byte {
	if xs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = one(b, x)
	}
	return append(b, ']')
}

func appendJSONStrings(b []byte, ss []string) []byte {
	return appendJSONList(b, ss, appendJSONString)
}

func appendJSONPrefixes(b []byte, ps []netip.Prefix) []byte {
	return appendJSONList(b, ps, func(b []byte, p netip.Prefix) []byte {
		b, _ = p.AppendText(append(b, '"'))
		return append(b, '"')
	})
}

func appendJSONPorts(b []byte, ps []calc.PortRange) []byte {
	return appendJSONList(b, ps, func(b []byte, p calc.PortRange) []byte {
		b = strconv.AppendUint(append(b, `{"Min":`...), uint64(p.Min), 10)
		return append(strconv.AppendUint(append(b, `,"Max":`...), uint64(p.Max), 10), '}')
	})
}

func appendJSONUint8(b []byte, v *uint8) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return strconv.AppendUint(b, uint64(*v), 10)
}

// Program is a compiled stage.
type Program struct {
	Insns asm.Instructions
	Slots []Slot
	// Hash identifies the program: a hex SHA-256 of its listing.
	Hash string
}

// Description is what a loaded program carries about itself (see
// bpf.Description).
type Description = bpf.Description

// MaxInsns bounds a program: a jump reaches at most 32,767 instructions.
const MaxInsns = 32000

// Compile compiles a stage. It fails only for a program too large to
// load; the caller then fails closed.
func Compile(in Input) (*Program, error) {
	g := newGen()
	g.prologue(usesSets(in))
	for ti, t := range in.Tiers {
		pass := fmt.Sprintf("tier%d_end", ti)
		var rs []placed
		for _, p := range t.Policies {
			owner := RulesDigest(p.Rules)
			for i, r := range p.Rules {
				rs = append(rs, placed{r, Slot{Tier: t.Name, Policy: p.ID.String(), Namespace: p.ID.Namespace, Name: p.ID.Name, Rule: i}, owner})
			}
		}
		g.rules(rs, pass)
		if in.Final && t.DefaultAction != calc.Pass {
			g.verdict(verdictDeny, Slot{Tier: t.Name, Rule: -1, Index: -1, Action: "Deny", Match: "end of tier " + t.Name + ": no policy allowed or passed the packet"})
		}
		g.label(pass)
	}
	if in.Final {
		for pi, p := range in.Profiles {
			next := fmt.Sprintf("profile%d_end", pi)
			var rs []placed
			owner := RulesDigest(p.Rules)
			for i, r := range p.Rules {
				rs = append(rs, placed{r, Slot{Profile: p.Name, Name: p.Name, Rule: i}, owner})
			}
			g.rules(rs, next)
			g.label(next)
		}
		g.verdict(verdictDeny, Slot{Rule: -1, Index: -1, Action: "Deny", Match: "no policy or profile allowed the packet"})
	} else {
		g.verdict(verdictNone, Slot{Rule: -1, Index: -1, Action: "None", Match: "no decision: the walk goes on"})
	}
	g.epilogue()
	if err := g.err(); err != nil {
		return nil, err
	}
	if len(g.insns) > MaxInsns {
		return nil, fmt.Errorf("policy program of %d instructions: more than %d", len(g.insns), MaxInsns)
	}
	sum := sha256.Sum256([]byte(fmt.Sprint(g.insns)))
	return &Program{Insns: g.insns, Slots: g.slots, Hash: hex.EncodeToString(sum[:])}, nil
}

func usesSets(in Input) (src, dst bool) {
	check := func(rs []calc.Rule) {
		for _, r := range rs {
			src = src || len(r.SrcIPSets)+len(r.NotSrcIPSets) > 0
			dst = dst || len(r.DstIPSets)+len(r.NotDstIPSets) > 0
		}
	}
	for _, t := range in.Tiers {
		for _, p := range t.Policies {
			check(p.Rules)
		}
	}
	if in.Final {
		for _, p := range in.Profiles {
			check(p.Rules)
		}
	}
	return src, dst
}
