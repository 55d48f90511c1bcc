package rules

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
)

// Chain names and prefixes, as Calico's.
const (
	ChainFilterInput    = "cali-INPUT"
	ChainFilterOutput   = "cali-OUTPUT"
	ChainFilterForward  = "cali-FORWARD"
	ChainPrerouting     = "cali-PREROUTING"
	ChainPostrouting    = "cali-POSTROUTING"
	ChainRawOutput      = "cali-OUTPUT"
	ChainNATOutgoing    = "cali-nat-outgoing"
	ChainNATOutput      = "cali-OUTPUT"
	ChainFIPDNAT        = "cali-fip-dnat"
	ChainFIPSNAT        = "cali-fip-snat"
	ChainWorkloadToHost = "cali-wl-to-host"
	ChainFromWlDispatch = "cali-from-wl-dispatch"
	ChainToWlDispatch   = "cali-to-wl-dispatch"
	ChainFromHEP        = "cali-from-host-endpoint"
	ChainToHEP          = "cali-to-host-endpoint"
	ChainFromHEPForward = "cali-from-hep-forward"
	ChainToHEPForward   = "cali-to-hep-forward"
	ChainFailsafeIn     = "cali-failsafe-in"
	ChainFailsafeOut    = "cali-failsafe-out"
	ChainRPFSkip        = "cali-rpf-skip"
	ChainCIDRBlock      = "cali-cidr-block"

	PrefixToWorkload    = "cali-tw-"
	PrefixFromWorkload  = "cali-fw-"
	PrefixFromHost      = "cali-fh-"
	PrefixToHost        = "cali-th-"
	PrefixFromHostFwd   = "cali-fhfw-"
	PrefixToHostFwd     = "cali-thfw-"
	PrefixPolicyIn      = "cali-pi-"
	PrefixPolicyOut     = "cali-po-"
	PrefixProfileIn     = "cali-pri-"
	PrefixProfileOut    = "cali-pro-"
	workloadIfaceSuffix = "+"
)

// Input is what one family's ruleset is rendered from: the calc output
// the dataplane accumulated.
type Input struct {
	Config    *calc.Config
	IPVersion int
	Policies  map[calc.PolicyID]*calc.Policy
	Profiles  map[string]*calc.Profile
	Endpoints map[calc.EndpointID]*calc.Endpoint
}

// PolicyChain names a policy's chain for a direction.
func PolicyChain(id calc.PolicyID, ingress bool) string {
	prefix := PrefixPolicyOut
	if ingress {
		prefix = PrefixPolicyIn
	}
	return ChainName(prefix, id.Tier+"/"+id.String())
}

// ProfileChain names a profile's chain for a direction.
func ProfileChain(name string, ingress bool) string {
	prefix := PrefixProfileOut
	if ingress {
		prefix = PrefixProfileIn
	}
	return ChainName(prefix, name)
}

func markMatch(bits int) string    { return fmt.Sprintf("-m mark --mark %#x/%#x", bits, bits) }
func notMarkMatch(bits int) string { return fmt.Sprintf("-m mark --mark 0x0/%#x", bits) }
func setMark(bits int) string      { return fmt.Sprintf("MARK --set-xmark %#x/%#x", bits, bits) }
func clearMark(bits int) string    { return fmt.Sprintf("MARK --set-xmark 0x0/%#x", bits) }

type builder struct {
	in Input
	m  *marks
	// filterReturn, mangleReturn and filterReject are the iptables action
	// settings (see add).
	filterReturn, mangleReturn, filterReject bool
	tables                                   map[string][]Chain
	// dispatchSeen is the dispatch trees of the last render and
	// dispatchNext those of this one (DispatchChains with a cache).
	dispatchSeen, dispatchNext map[string]dispatchTree
}

// newBuilder starts a rendering; in.Config must be set.
func newBuilder(in Input) *builder {
	cfg := in.Config
	return &builder{in: in, m: marksFor(cfg.IptablesMarkMask), tables: map[string][]Chain{},
		filterReturn: strings.EqualFold(cfg.IptablesFilterAllowAction, "Return"),
		mangleReturn: strings.EqualFold(cfg.IptablesMangleAllowAction, "Return"),
		filterReject: strings.EqualFold(cfg.IptablesFilterDenyAction, "Reject")}
}

// add files a chain. Rules are written with ACCEPT and DROP as verdicts;
// here they become the configured ones, as Calico's
// iptablesFilterAllowAction (ACCEPT or RETURN in filter),
// iptablesMangleAllowAction (the same in mangle) and
// iptablesFilterDenyAction (DROP or REJECT in filter).
func (b *builder) add(table, name string, rules []Rule) {
	ret := table == "filter" && b.filterReturn || table == "mangle" && b.mangleReturn
	reject := table == "filter" && b.filterReject
	for i := 0; (ret || reject) && i < len(rules); i++ {
		switch {
		case ret && rules[i].Action == "ACCEPT":
			rules[i].Action = "RETURN"
		case reject && rules[i].Action == "DROP":
			rules[i].Action = "REJECT"
		}
	}
	hashRules(name, rules)
	b.tables[table] = append(b.tables[table], Chain{Name: name, Rules: rules})
}

// Render builds the ruleset of one family.
func Render(in Input) *Ruleset {
	cfg := in.Config
	if cfg == nil {
		cfg = calc.MergeConfig(nil, nil)
		in.Config = cfg
	}
	b := newBuilder(in)
	var workloads, hosts []*calc.Endpoint
	for _, e := range in.Endpoints {
		if e.ID.Kind == calc.HostEndpoint {
			if e.InterfaceName != "" {
				hosts = append(hosts, e)
			}
		} else if e.InterfaceName != "" {
			workloads = append(workloads, e)
		}
	}
	byIface := func(a, b *calc.Endpoint) int { return cmp.Compare(a.InterfaceName, b.InterfaceName) }
	slices.SortFunc(workloads, byIface)
	// A host endpoint of all interfaces ("*") comes after those naming
	// one: a named endpoint wins for its interface.
	slices.SortFunc(hosts, func(a, b *calc.Endpoint) int {
		if (a.InterfaceName == "*") != (b.InterfaceName == "*") {
			if a.InterfaceName == "*" {
				return 1
			}
			return -1
		}
		return byIface(a, b)
	})

	// filter: the entry chains.
	input := vxlanInput(cfg, in.IPVersion)
	for _, p := range cfg.InterfacePrefixes {
		input = append(input, Rule{Match: "-i " + p + workloadIfaceSuffix, Action: "goto " + ChainWorkloadToHost})
	}
	input = append(input,
		Rule{Match: b.m.isAccept, Action: "ACCEPT"},
		Rule{Action: b.m.clearAll},
		Rule{Action: ChainFromHEP},
		Rule{Match: b.m.isAccept, Action: "ACCEPT", Comment: "Host endpoint policy accepted packet."},
	)
	b.add("filter", ChainFilterInput, fixGoto(input))
	toHost := strings.ToUpper(cfg.DefaultEndpointToHostAction)
	if toHost == "" {
		toHost = "DROP"
	}
	var toHostRules []Rule
	if in.IPVersion == 6 {
		// Neighbour discovery and multicast listener messages from a
		// workload to the host are always accepted (as Calico): without
		// them the host cannot reach the workload's IPv6 address at all.
		for _, typ := range []int{130, 131, 132, 133, 135, 136} {
			toHostRules = append(toHostRules, Rule{Match: fmt.Sprintf("-p ipv6-icmp -m icmp6 --icmpv6-type %d", typ), Action: "ACCEPT"})
		}
	}
	toHostRules = append(toHostRules, workloadEncapDrop(cfg, "")...)
	toHostRules = append(toHostRules,
		Rule{Action: ChainFromWlDispatch},
		Rule{Action: toHost, Comment: "Configured DefaultEndpointToHostAction"},
	)
	b.add("filter", ChainWorkloadToHost, toHostRules)
	var forward []Rule
	forward = append(forward,
		Rule{Action: b.m.clearAll},
		Rule{Action: ChainFromHEPForward},
	)
	for _, p := range cfg.InterfacePrefixes {
		forward = append(forward, workloadEncapDrop(cfg, "-i "+p+workloadIfaceSuffix+" ")...)
		forward = append(forward, Rule{Match: "-i " + p + workloadIfaceSuffix, Action: ChainFromWlDispatch})
	}
	for _, p := range cfg.InterfacePrefixes {
		forward = append(forward, Rule{Match: "-o " + p + workloadIfaceSuffix, Action: ChainToWlDispatch})
	}
	forward = append(forward,
		Rule{Action: ChainToHEPForward},
		Rule{Action: ChainCIDRBlock},
		Rule{Match: b.m.isAccept, Action: "ACCEPT", Comment: "Policy explicitly accepted packet."},
	)
	b.add("filter", ChainFilterForward, forward)
	b.add("filter", ChainCIDRBlock, cidrBlockRules(cfg, in.IPVersion))
	output := []Rule{{Match: b.m.isAccept, Action: "ACCEPT"}}
	for _, p := range cfg.InterfacePrefixes {
		output = append(output, Rule{Match: "-o " + p + workloadIfaceSuffix, Action: "RETURN"})
	}
	output = append(output, vxlanOutput(cfg, in.IPVersion)...)
	output = append(output,
		Rule{Action: b.m.clearAll},
		Rule{Action: ChainToHEP},
		Rule{Match: b.m.isAccept, Action: "ACCEPT", Comment: "Host endpoint policy accepted packet."},
	)
	b.add("filter", ChainFilterOutput, output)

	// Workload dispatch: every known interface goes to its chain, any
	// other workload interface is dropped (fail closed).
	ifaces := make([]string, len(workloads))
	for i, e := range workloads {
		ifaces[i] = e.InterfaceName
	}
	b.dispatch(ChainFromWlDispatch, ChainFromWlDispatch, "-i", PrefixFromWorkload, ifaces, 0)
	b.dispatch(ChainToWlDispatch, ChainToWlDispatch, "-o", PrefixToWorkload, ifaces, 0)
	for _, e := range workloads {
		b.add("filter", ChainName(PrefixToWorkload, e.InterfaceName), b.endpointChain(e.Tiers, e.Profiles, true, "", true))
		b.add("filter", ChainName(PrefixFromWorkload, e.InterfaceName), b.endpointChain(e.Tiers, e.Profiles, false, "", true))
	}

	// Host endpoints.
	b.failsafe("filter")
	var fromHEP, toHEP, fromFwd, toFwd []Rule
	for _, e := range hosts {
		in, out := ifaceMatch("-i", e.InterfaceName), ifaceMatch("-o", e.InterfaceName)
		suffix := hostSuffix(e.InterfaceName)
		if e.InterfaceName == "*" {
			fromHEP = append(fromHEP, b.workloadGuard("-i")...)
			toHEP = append(toHEP, b.workloadGuard("-o")...)
			fromFwd = append(fromFwd, b.workloadGuard("-i")...)
			toFwd = append(toFwd, b.workloadGuard("-o")...)
		}
		fromHEP = append(fromHEP, Rule{Match: in, Action: "goto " + ChainName(PrefixFromHost, suffix)})
		toHEP = append(toHEP, Rule{Match: out, Action: "goto " + ChainName(PrefixToHost, suffix)})
		fromFwd = append(fromFwd, Rule{Match: in, Action: "goto " + ChainName(PrefixFromHostFwd, suffix)})
		toFwd = append(toFwd, Rule{Match: out, Action: "goto " + ChainName(PrefixToHostFwd, suffix)})
	}
	b.add("filter", ChainFromHEP, fixGoto(fromHEP))
	b.add("filter", ChainToHEP, fixGoto(toHEP))
	b.add("filter", ChainFromHEPForward, fixGoto(fromFwd))
	b.add("filter", ChainToHEPForward, fixGoto(toFwd))
	for _, e := range hosts {
		suffix := hostSuffix(e.InterfaceName)
		b.add("filter", ChainName(PrefixFromHost, suffix), b.endpointChain(e.Tiers, e.Profiles, true, ChainFailsafeIn, true))
		b.add("filter", ChainName(PrefixToHost, suffix), b.endpointChain(e.Tiers, e.Profiles, false, ChainFailsafeOut, true))
		b.add("filter", ChainName(PrefixFromHostFwd, suffix), b.forwardChain(e.ForwardTiers, true))
		b.add("filter", ChainName(PrefixToHostFwd, suffix), b.forwardChain(e.ForwardTiers, false))
	}
	b.policyChains("filter", false)

	// raw: anti-spoofing of workloads, untracked policy; mangle: preDNAT
	// policy (host endpoints).
	b.add("raw", ChainRPFSkip, rpfSkipRules(workloads, in.IPVersion))
	b.untracked(hosts)
	b.preDNAT(hosts)

	// nat: floating IPs (DNAT to the workload on the way in, from
	// outside and from the host itself; SNAT of a workload reaching its
	// own floating IP), then masquerade from pools with natOutgoing to
	// anywhere outside the pools.
	b.add("nat", ChainPrerouting, []Rule{{Action: ChainFIPDNAT}})
	b.add("nat", ChainNATOutput, []Rule{{Action: ChainFIPDNAT}})
	b.add("nat", ChainPostrouting, []Rule{{Action: ChainFIPSNAT}, {Action: ChainNATOutgoing}})
	dnat, snat := floatingRules(workloads, in.IPVersion)
	b.add("nat", ChainFIPDNAT, dnat)
	b.add("nat", ChainFIPSNAT, snat)
	b.add("nat", ChainNATOutgoing, natOutgoingRules(cfg.NAT, in.IPVersion))

	rs := &Ruleset{IPVersion: in.IPVersion, Tables: b.tables}
	for _, j := range []struct{ table, kernel, ours string }{
		{"raw", "PREROUTING", ChainPrerouting}, {"raw", "OUTPUT", ChainRawOutput},
		{"mangle", "PREROUTING", ChainPrerouting},
		{"nat", "PREROUTING", ChainPrerouting}, {"nat", "OUTPUT", ChainNATOutput}, {"nat", "POSTROUTING", ChainPostrouting},
		{"filter", "INPUT", ChainFilterInput}, {"filter", "FORWARD", ChainFilterForward}, {"filter", "OUTPUT", ChainFilterOutput},
	} {
		r := []Rule{{Action: j.ours}}
		hashRules(j.kernel, r)
		rs.Jumps = append(rs.Jumps, KernelJump{Table: j.table, Chain: j.kernel, Rule: r[0]})
	}
	return rs
}

// dispatchFanout is the largest dispatch chain written flat; above it the
// interfaces are split by name prefix into child chains, as Calico does,
// so a packet meets a few short chains instead of one rule per endpoint.
const dispatchFanout = 16

// dispatch writes the dispatch chain name for the sorted interfaces that
// share their first depth characters: one goto per interface to its
// endpoint chain (prefix), or, when there are many, one goto per group of
// interfaces with the same next character to a child chain
// (<root>-<group>, hashed to fit). Every dispatch chain ends with DROP: an
// unknown interface fails closed.
func (b *builder) dispatch(root, name, flag, prefix string, ifaces []string, depth int) {
	if b.dispatchNext != nil {
		if t, ok := b.dispatchSeen[name]; ok && t.depth == depth && slices.Equal(t.ifaces, ifaces) {
			b.tables["filter"] = append(b.tables["filter"], t.chains...)
			// Kept with the sub-trees under it, for when one of them
			// changes next time.
			for _, c := range t.chains {
				if d, ok := b.dispatchSeen[c.Name]; ok {
					b.dispatchNext[c.Name] = d
				}
			}
			return
		}
		first := len(b.tables["filter"])
		defer func() {
			b.dispatchNext[name] = dispatchTree{ifaces: slices.Clone(ifaces), depth: depth,
				chains: slices.Clone(b.tables["filter"][first:])}
		}()
	}
	var rules []Rule
	if len(ifaces) <= dispatchFanout {
		for _, i := range ifaces {
			rules = append(rules, Rule{Match: flag + " " + i, Action: "goto " + ChainName(prefix, i)})
		}
	} else {
		// Skip the characters every interface shares.
		for {
			first, last := ifaces[0], ifaces[len(ifaces)-1]
			if depth >= len(first) || depth >= len(last) || first[depth] != last[depth] {
				break
			}
			depth++
		}
		for start := 0; start < len(ifaces); {
			end := start + 1
			if depth < len(ifaces[start]) {
				for end < len(ifaces) && depth < len(ifaces[end]) && ifaces[end][depth] == ifaces[start][depth] {
					end++
				}
			}
			group := ifaces[start:end]
			if len(group) == 1 || depth >= len(ifaces[start]) {
				rules = append(rules, Rule{Match: flag + " " + ifaces[start], Action: "goto " + ChainName(prefix, ifaces[start])})
			} else {
				pfx := ifaces[start][:depth+1]
				child := ChainName(root+"-", pfx)
				rules = append(rules, Rule{Match: flag + " " + pfx + workloadIfaceSuffix, Action: "goto " + child})
				b.dispatch(root, child, flag, prefix, group, depth+1)
			}
			start = end
		}
	}
	rules = append(rules, Rule{Action: "DROP", Comment: "Unknown interface"})
	b.add("filter", name, fixGoto(rules))
}

// fixGoto turns the "goto X" shorthand into iptables' -g.
func fixGoto(rules []Rule) []Rule {
	for i, r := range rules {
		if t, ok := strings.CutPrefix(r.Action, "goto "); ok {
			rules[i].Match = strings.TrimSpace(r.Match + " -g " + t)
			rules[i].Action = ""
		}
	}
	return rules
}

func ifaceMatch(flag, iface string) string {
	if iface == "*" {
		return ""
	}
	return flag + " " + iface
}

func hostSuffix(iface string) string {
	if iface == "*" {
		return "any"
	}
	return iface
}

// workloadGuard returns, for the dispatch of a host endpoint of all
// interfaces, the rules that leave workload interfaces out: "*" means
// every interface of the host but the workloads' and those
// interfaceExclude names (an entry that is a /regexp/ cannot be written
// as an iptables match and is not applied to "*").
func (b *builder) workloadGuard(flag string) []Rule {
	var out []Rule
	for _, p := range b.in.Config.InterfacePrefixes {
		out = append(out, Rule{Match: flag + " " + p + workloadIfaceSuffix, Action: "RETURN"})
	}
	for _, x := range b.in.Config.InterfaceExclude {
		if x != "" && !strings.HasPrefix(x, "/") {
			out = append(out, Rule{Match: flag + " " + x, Action: "RETURN"})
		}
	}
	return out
}

// forwardChain is the policy of traffic forwarded through a host endpoint
// in one direction: its applyOnForward policies, then drop; with none,
// the chain is empty and forwarded traffic goes on to the workload
// policy (as Calico: profiles never apply to forwarded traffic).
func (b *builder) forwardChain(tiers []calc.TierPolicies, ingress bool) []Rule {
	for _, t := range tiers {
		ids := t.Egress
		if ingress {
			ids = t.Ingress
		}
		for _, id := range ids {
			if _, ok := b.in.Policies[id]; ok {
				return b.endpointChain(tiers, nil, ingress, "", true)
			}
		}
	}
	return nil
}

// endpointChain is the policy of one endpoint and direction: conntrack
// fast path, failsafe ports (host endpoints), the tiers, the profiles,
// then drop. final false leaves out the profiles and the drop (untracked
// and preDNAT chains fall through to normal policy).
func (b *builder) endpointChain(tiers []calc.TierPolicies, profiles []string, ingress bool, failsafe string, final bool) []Rule {
	var rules []Rule
	if final {
		rules = append(rules,
			Rule{Match: "-m conntrack --ctstate RELATED,ESTABLISHED", Action: "ACCEPT"},
			Rule{Match: "-m conntrack --ctstate INVALID", Action: "DROP"},
		)
	}
	rules = append(rules, Rule{Action: b.m.clearAcceptPass})
	if failsafe != "" {
		rules = append(rules, Rule{Action: failsafe})
	}
	for _, t := range tiers {
		ids := t.Egress
		if ingress {
			ids = t.Ingress
		}
		if len(ids) == 0 {
			continue
		}
		rules = append(rules, Rule{Action: b.m.clearPass, Comment: "Start of tier " + t.Name})
		// Each policy is entered only while no earlier one accepted or
		// passed the packet; one RETURN after the tier ends an accepted
		// packet's walk. (One rule per policy instead of a jump and a
		// RETURN each: the kernel walks every rule of every path at each
		// nftables commit, so shorter endpoint chains make every update
		// of a large node faster.)
		for _, id := range ids {
			if _, ok := b.in.Policies[id]; !ok {
				continue
			}
			rules = append(rules, Rule{Match: b.m.notAcceptPass, Action: PolicyChain(id, ingress)})
		}
		rules = append(rules, Rule{Match: b.m.isAccept, Action: "RETURN", Comment: "Return if policy accepted"})
		if t.DefaultAction != calc.Pass && final {
			rules = append(rules, Rule{Match: b.m.notPass, Action: "DROP", Comment: "End of tier " + t.Name + ". Drop if no policies passed packet"})
		}
	}
	if !final {
		return rules
	}
	profileJumps := 0
	for _, p := range profiles {
		if _, ok := b.in.Profiles[p]; !ok {
			continue
		}
		match := ""
		if profileJumps > 0 {
			match = b.m.notAccept
		}
		rules = append(rules, Rule{Match: match, Action: ProfileChain(p, ingress)})
		profileJumps++
	}
	if profileJumps > 0 {
		rules = append(rules, Rule{Match: b.m.isAccept, Action: "RETURN", Comment: "Return if profile accepted"})
	}
	return append(rules, Rule{Action: "DROP", Comment: "Drop if no profiles matched"})
}

// policyChains renders every policy and profile chain of a table. untracked
// and preDNAT select which policies belong to raw and mangle.
func (b *builder) policyChains(table string, special bool) {
	ids := slices.SortedFunc(func(yield func(calc.PolicyID) bool) {
		for id := range b.in.Policies {
			if !yield(id) {
				return
			}
		}
	}, func(a, c calc.PolicyID) int { return cmp.Compare(PolicyChain(a, true), PolicyChain(c, true)) })
	for _, id := range ids {
		p := b.in.Policies[id]
		isSpecial := p.DoNotTrack || p.PreDNAT
		if isSpecial != special || table == "raw" && !p.DoNotTrack || table == "mangle" && !p.PreDNAT {
			continue
		}
		allow := "ALLOW"
		if p.DoNotTrack {
			allow = "NOTRACK"
		}
		if p.Ingress {
			b.add(table, PolicyChain(id, true), b.ruleChain(p.Inbound, allow))
		}
		if p.Egress {
			b.add(table, PolicyChain(id, false), b.ruleChain(p.Outbound, allow))
		}
	}
	if special {
		return
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range b.in.Profiles {
			if !yield(n) {
				return
			}
		}
	}) {
		p := b.in.Profiles[name]
		b.add(table, ProfileChain(name, true), b.ruleChain(p.Inbound, "ALLOW"))
		b.add(table, ProfileChain(name, false), b.ruleChain(p.Outbound, "ALLOW"))
	}
}

// ruleChain renders the rules of a policy or profile. A rule that sets the
// accept or pass mark is followed by a RETURN only when a later rule could
// still act on the packet: nothing follows the last one, and a run of Allow
// rules (the common policy) needs none, since setting the accept mark
// again changes nothing.
func (b *builder) ruleChain(rules []calc.Rule, allow string) []Rule {
	var out []Rule
	// lastActing is the index of the last rule that is not a plain Allow.
	lastActing := -1
	for i, r := range rules {
		if r.Action != calc.Allow || allow == "NOTRACK" {
			lastActing = i
		}
	}
	for i, r := range rules {
		matches := ruleMatches(r, b.in.IPVersion, b.m)
		if len(matches) > 0 {
			out = append(out, notNetRules(r, b.in.IPVersion, b.m)...)
		}
		for k, m := range matches {
			last := i == len(rules)-1 && k == len(matches)-1
			origin := r.Index + 1
			switch r.Action {
			case calc.Allow:
				out = append(out, Rule{Match: m, Action: b.m.setAccept, Origin: origin})
				if allow == "NOTRACK" {
					out = append(out, Rule{Match: b.m.isAccept, Action: "CT --notrack"})
				}
				if i < lastActing {
					out = append(out, Rule{Match: b.m.isAccept, Action: "RETURN"})
				}
			case calc.Pass:
				out = append(out, Rule{Match: m, Action: b.m.setPass, Origin: origin})
				if !last {
					out = append(out, Rule{Match: b.m.isPass, Action: "RETURN"})
				}
			case calc.Deny:
				out = append(out, Rule{Match: m, Action: "DROP", Origin: origin})
			case calc.Log:
				out = append(out, Rule{Match: m, Action: `LOG --log-prefix "calico-packet: " --log-level 5`, Origin: origin})
			}
		}
	}
	return out
}

// failsafe renders the failsafe chains of a table.
func (b *builder) failsafe(table string) {
	// A port with a net is open only to that range (the source inbound,
	// the destination outbound), and only in the net's family.
	fs := func(ports []calc.ProtoPort, netFlag string) []Rule {
		var out []Rule
		for _, p := range ports {
			net := ""
			if p.Net.IsValid() {
				if is6(p.Net) != (b.in.IPVersion == 6) {
					continue
				}
				net = " " + netFlag + " " + p.Net.String()
			}
			out = append(out, Rule{Match: fmt.Sprintf("-p %s%s -m %s --dport %d", p.Protocol, net, p.Protocol, p.Port), Action: "ACCEPT"})
		}
		return out
	}
	b.add(table, ChainFailsafeIn, fs(b.in.Config.FailsafeInbound, "-s"))
	b.add(table, ChainFailsafeOut, fs(b.in.Config.FailsafeOutbound, "-d"))
}

// untracked renders the raw table: doNotTrack policy of host endpoints;
// a packet it allows is not tracked and accepted.
func (b *builder) untracked(hosts []*calc.Endpoint) {
	pre := []Rule{{Action: b.m.clearAll}}
	// Anti-spoofing: a packet from a workload whose source would not be
	// routed back out of the interface it came in by (strict reverse
	// path: not one of the workload's addresses, whose routes felix
	// writes) goes to cali-rpf-skip, which lets through only the
	// workload's allowSpoofedSourcePrefixes.
	for _, p := range b.in.Config.InterfacePrefixes {
		pre = append(pre, Rule{Match: "-i " + p + workloadIfaceSuffix + " -m rpfilter --invert", Action: "goto " + ChainRPFSkip})
	}
	out := []Rule{{Action: b.m.clearAll}}
	var chains [][2]any
	for _, e := range hosts {
		if len(e.UntrackedTiers) == 0 {
			continue
		}
		suffix := hostSuffix(e.InterfaceName)
		if e.InterfaceName == "*" {
			pre = append(pre, b.workloadGuard("-i")...)
			out = append(out, b.workloadGuard("-o")...)
		}
		pre = append(pre, Rule{Match: ifaceMatch("-i", e.InterfaceName), Action: "goto " + ChainName(PrefixFromHost, suffix)})
		out = append(out, Rule{Match: ifaceMatch("-o", e.InterfaceName), Action: "goto " + ChainName(PrefixToHost, suffix)})
		chains = append(chains, [2]any{suffix, e})
	}
	b.add("raw", ChainPrerouting, fixGoto(pre))
	b.add("raw", ChainRawOutput, fixGoto(out))
	if len(chains) == 0 {
		return
	}
	b.failsafe("raw")
	for _, c := range chains {
		suffix, e := c[0].(string), c[1].(*calc.Endpoint)
		b.add("raw", ChainName(PrefixFromHost, suffix), b.endpointChain(e.UntrackedTiers, nil, true, ChainFailsafeIn, false))
		b.add("raw", ChainName(PrefixToHost, suffix), b.endpointChain(e.UntrackedTiers, nil, false, ChainFailsafeOut, false))
	}
	b.policyChains("raw", true)
}

// preDNAT renders the mangle table: preDNAT policy of host endpoints,
// applied to new connections before DNAT.
func (b *builder) preDNAT(hosts []*calc.Endpoint) {
	pre := []Rule{
		{Match: "-m conntrack --ctstate RELATED,ESTABLISHED", Action: "ACCEPT"},
		// Accepted by untracked policy in raw: the mark must reach filter.
		{Match: b.m.isAccept, Action: "ACCEPT", Comment: "Untracked policy accepted packet."},
		{Action: b.m.clearAll},
	}
	// The dispatch is a chain of its own so each packet meets one
	// endpoint chain (goto) and the accept-mark rule after it still runs.
	var chains []*calc.Endpoint
	var dispatch []Rule
	for _, e := range hosts {
		if len(e.PreDNATTiers) == 0 {
			continue
		}
		if e.InterfaceName == "*" {
			dispatch = append(dispatch, b.workloadGuard("-i")...)
		}
		dispatch = append(dispatch, Rule{Match: ifaceMatch("-i", e.InterfaceName), Action: "goto " + ChainName(PrefixFromHost, hostSuffix(e.InterfaceName))})
		chains = append(chains, e)
	}
	if len(chains) > 0 {
		pre = append(pre, Rule{Action: ChainFromHEP})
	}
	pre = append(pre, Rule{Match: b.m.isAccept, Action: "ACCEPT", Comment: "PreDNAT policy accepted packet."})
	b.add("mangle", ChainPrerouting, pre)
	if len(chains) == 0 {
		return
	}
	b.add("mangle", ChainFromHEP, fixGoto(dispatch))
	b.failsafe("mangle")
	for _, e := range chains {
		b.add("mangle", ChainName(PrefixFromHost, hostSuffix(e.InterfaceName)), b.endpointChain(e.PreDNATTiers, nil, true, ChainFailsafeIn, false))
	}
	b.policyChains("mangle", true)
}

// rpfSkipRules is cali-rpf-skip: the packets of a workload that failed
// the reverse-path check, RETURNed (past the rest of cali-PREROUTING,
// which has nothing for workloads) when their source is one of the
// workload's allowSpoofedSourcePrefixes of this family; the rest are
// dropped. workloads are sorted by interface.
// floatingRules are the rules of cali-fip-dnat and cali-fip-snat for the
// family, as Calico writes them: a DNAT of each floating IP to its
// workload address (sorted by floating IP), and an SNAT to the floating
// IP of a workload's packet to its own address (its own floating IP,
// translated back: the reply must come back through the host). Replies
// to DNAT'd connections are translated back by conntrack. A floating IP
// named by two NATs is translated to the first workload address of the
// sort only (one packet cannot go to two).
func floatingRules(workloads []*calc.Endpoint, family int) (dnat, snat []Rule) {
	var nats []calc.NAT
	for _, e := range workloads {
		for _, n := range e.IPNATs {
			if n.External.Is6() == (family == 6) {
				nats = append(nats, n)
			}
		}
	}
	slices.SortFunc(nats, func(a, b calc.NAT) int {
		return cmp.Or(a.External.Compare(b.External), a.Internal.Compare(b.Internal))
	})
	nats = slices.CompactFunc(nats, func(a, b calc.NAT) bool { return a.External == b.External })
	host := func(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }
	for _, n := range nats {
		dnat = append(dnat, Rule{Match: "-d " + host(n.External), Action: "DNAT --to-destination " + n.Internal.String()})
	}
	// One SNAT per workload address (to its first floating IP).
	slices.SortStableFunc(nats, func(a, b calc.NAT) int { return a.Internal.Compare(b.Internal) })
	nats = slices.CompactFunc(nats, func(a, b calc.NAT) bool { return a.Internal == b.Internal })
	for _, n := range nats {
		snat = append(snat, Rule{Match: "-s " + host(n.Internal) + " -d " + host(n.Internal), Action: "SNAT --to-source " + n.External.String()})
	}
	return dnat, snat
}

func rpfSkipRules(workloads []*calc.Endpoint, family int) []Rule {
	var out []Rule
	for _, e := range workloads {
		for _, p := range e.AllowSpoofedSourcePrefixes {
			if is6(p) == (family == 6) {
				out = append(out, Rule{Match: "-i " + e.InterfaceName + " -s " + p.String(), Action: "RETURN"})
			}
		}
	}
	return append(out, Rule{Action: "DROP", Comment: "Workload source address spoofed"})
}
