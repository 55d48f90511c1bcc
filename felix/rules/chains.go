// Package rules renders the calculation graph's output into iptables
// chains named like Calico's, as data (tables of chains of rules, each
// rule tagged with a hash) and as iptables-restore text. It is pure: the
// kernel driver (felix/dataplane/iptables) writes what it returns.
package rules

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// marks are the packet mark bits felix uses, taken as Calico takes them
// from iptablesMarkMask: the lowest set bit of the mask is accept, the
// next pass, the next scratch (used within one rule), and all four lowest
// bits are cleared at the start of each pass. With the default mask
// 0xffff0000: 0x10000, 0x20000, 0x40000, all 0xf0000. The match and
// target texts are made once per mask: rendering uses them on every rule.
type marks struct {
	accept, pass, scratch, all int

	isAccept, isPass, isScratch       string // -m mark --mark X/X
	notAccept, notPass, notAcceptPass string // -m mark --mark 0x0/X
	setAccept, setPass, setScratch    string // MARK --set-xmark X/X
	clearAll, clearAcceptPass         string // MARK --set-xmark 0x0/X
	clearPass, clearScratch           string
}

// defaultMarks are the marks of calc.DefaultMarkMask, made once.
var defaultMarks = newMarks(calc.DefaultMarkMask)

// marksFor returns the marks of a mask.
func marksFor(mask uint32) *marks {
	if mask == calc.DefaultMarkMask {
		return defaultMarks
	}
	return newMarks(mask)
}

func newMarks(mask uint32) *marks {
	var bits [4]int
	n := 0
	for i := 0; i < 32 && n < 4; i++ {
		if mask&(1<<i) != 0 {
			bits[n] = 1 << i
			n++
		}
	}
	if n < 4 {
		// calc.MergeConfig never hands out such a mask.
		return newMarks(calc.DefaultMarkMask)
	}
	m := &marks{accept: bits[0], pass: bits[1], scratch: bits[2], all: bits[0] | bits[1] | bits[2] | bits[3]}
	m.isAccept, m.isPass, m.isScratch = markMatch(m.accept), markMatch(m.pass), markMatch(m.scratch)
	m.notAccept, m.notPass, m.notAcceptPass = notMarkMatch(m.accept), notMarkMatch(m.pass), notMarkMatch(m.accept|m.pass)
	m.setAccept, m.setPass, m.setScratch = setMark(m.accept), setMark(m.pass), setMark(m.scratch)
	m.clearAll, m.clearAcceptPass, m.clearPass, m.clearScratch = clearMark(m.all), clearMark(m.accept|m.pass), clearMark(m.pass), clearMark(m.scratch)
	return m
}

// ChainPrefix starts the name of every chain felix owns.
const ChainPrefix = "cali-"

// MaxChainName is the longest chain name iptables accepts.
const MaxChainName = 28

// Rule is one iptables rule: the match part, the target (what follows
// -j, for example "ACCEPT", "cali-pi-x" or "MARK --set-xmark 0x10000/0x10000"),
// an optional human comment, and Hash, a per-rule hash that also covers the
// chain name and every rule before it, so the dataplane can compare the
// hashes it reads back and rewrite only what changed.
type Rule struct {
	Match   string
	Action  string
	Comment string
	Hash    string
	// Origin, in a policy or profile chain, is 1 + the index of the calc
	// rule whose match and action this rule writes (0 for the chain's
	// helper rules): the rule whose counter is that calc rule's. It is
	// not part of the hash or the kernel rule.
	Origin int
}

// Chain is one of our chains.
type Chain struct {
	Name  string
	Rules []Rule
}

// KernelJump is a rule felix inserts into a kernel chain (the only rules
// it writes outside its own chains).
type KernelJump struct {
	Table, Chain string
	Rule         Rule
}

// Ruleset is everything felix programs for one IP family.
type Ruleset struct {
	IPVersion int
	// Tables maps "filter", "nat", "mangle" and "raw" to their chains, in
	// a stable order.
	Tables map[string][]Chain
	Jumps  []KernelJump
}

// TableNames is the order tables are written in.
func TableNames() []string { return []string{"raw", "mangle", "nat", "filter"} }

// hashRules fills in the hash of every rule of a chain.
func hashRules(chain string, rules []Rule) {
	prev := chain
	for i := range rules {
		sum := sha256.Sum256([]byte(prev + "\x00" + rules[i].Match + "\x00" + rules[i].Action + "\x00" + rules[i].Comment))
		rules[i].Hash = base64.RawURLEncoding.EncodeToString(sum[:])[:16]
		prev = rules[i].Hash
	}
}

// Text renders a rule as an iptables-restore line of chain, without the
// leading -A/-I.
func (r Rule) Text() string {
	var b strings.Builder
	if r.Match != "" {
		b.WriteString(r.Match)
		b.WriteString(" ")
	}
	fmt.Fprintf(&b, "-m comment --comment \"cali:%s\"", r.Hash)
	if r.Comment != "" {
		fmt.Fprintf(&b, " -m comment --comment %q", r.Comment)
	}
	if r.Action != "" {
		b.WriteString(" -j ")
		b.WriteString(r.Action)
	}
	return b.String()
}

// Targets lists the chains the rule jumps to (-j) or goes to (-g): its
// action when that names one of our chains, and a goto in its match.
func (r Rule) Targets() []string {
	var out []string
	if a, _, _ := strings.Cut(r.Action, " "); strings.HasPrefix(a, ChainPrefix) {
		out = append(out, a)
	}
	f := strings.Fields(r.Match)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-g" {
			out = append(out, f[i+1])
		}
	}
	return out
}

// Restore renders one table as iptables-restore input for --noflush: a
// declaration (which creates or empties the chain) and the rules of every
// chain. With jumps the kernel-chain jumps are inserted too (for a first
// write or a test; the driver checks them one by one). The text is the
// same for the nft and legacy backends.
func (rs *Ruleset) Restore(table string, jumps bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", table)
	for _, c := range rs.Tables[table] {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
	}
	for _, c := range rs.Tables[table] {
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "-A %s %s\n", c.Name, r.Text())
		}
	}
	if jumps {
		for _, j := range rs.Jumps {
			if j.Table == table {
				fmt.Fprintf(&b, "-I %s 1 %s\n", j.Chain, j.Rule.Text())
			}
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// ChainName returns prefix+name, or when that is longer than iptables
// allows, prefix + "_" + a hash of name, as Calico does.
func ChainName(prefix, name string) string {
	if len(prefix)+len(name) <= MaxChainName && !strings.ContainsAny(name, " \t\"'") {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(sum[:])[:MaxChainName-len(prefix)-1]
}

// IPSetName is the kernel name of a calc IP set ID for a family:
// cali40s:<hash>, cali40n:<hash>, cali40masq-ipam-pools (cali60… for IPv6),
// at most 31 characters.
func IPSetName(id string, ipVersion int) string {
	name := fmt.Sprintf("cali%d0%s", ipVersion, id)
	if len(name) > 31 {
		sum := sha256.Sum256([]byte(id))
		name = fmt.Sprintf("cali%d0%s", ipVersion, base64.RawURLEncoding.EncodeToString(sum[:])[:25])
	}
	return name
}
