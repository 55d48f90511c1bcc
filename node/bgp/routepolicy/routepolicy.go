// Package routepolicy compiles, purely from resources, what a node's BGP
// speaker sends and takes: the node sends its own routes only (the paths
// it originates), reflects iBGP routes when it is a route reflector, and
// each session applies the rules of the BGPFilters its BGPPeer names, in
// order, before that default. The result is a neutral list of statements
// (first match decides) that the router adapter turns into GoBGP policy.
package routepolicy

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/node/bgp/peers"
)

// Family restricts a statement to one address family.
type Family string

// Families.
const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Source restricts a statement to routes of one origin.
type Source string

// Sources: originated by this node, learned over iBGP, learned over eBGP.
const (
	SourceLocal    Source = "local"
	SourceInternal Source = "internal"
	SourceExternal Source = "external"
)

// Action is what a matching statement does. ActionNone applies the
// statement's modification and goes on to the next statement.
type Action string

// Actions.
const (
	ActionNone   Action = ""
	ActionAccept Action = "accept"
	ActionReject Action = "reject"
)

// ExportDefault and ImportDefault are what happens to a route no
// statement decides: nothing is sent that is not explicitly ours, and
// everything offered is taken.
const (
	ExportDefault = ActionReject
	ImportDefault = ActionAccept
)

// PrefixSet is a named prefix range: routes inside Prefix whose length is
// in [MinLen, MaxLen].
type PrefixSet struct {
	Name   string       `json:"name"`
	Prefix netip.Prefix `json:"prefix"`
	MinLen int          `json:"minLen"`
	MaxLen int          `json:"maxLen"`
}

// NeighborSet is a named set of peer addresses.
type NeighborSet struct {
	Name      string       `json:"name"`
	Addresses []netip.Addr `json:"addresses"`
}

// Statement is one rule. Every condition set must hold for it to match.
type Statement struct {
	Name   string `json:"name"`
	Family Family `json:"family,omitempty"`
	// Neighbors names the NeighborSet of the peer a route is sent to
	// (export) or came from (import).
	Neighbors string `json:"neighbors,omitempty"`
	// Prefixes names a PrefixSet the route must lie in, or with
	// NotPrefixes must not.
	Prefixes    string `json:"prefixes,omitempty"`
	NotPrefixes bool   `json:"notPrefixes,omitempty"`
	Source      Source `json:"source,omitempty"`
	// NextHopIn requires the route's (original) next hop to lie in one of
	// these prefixes: the subnets of the interfaces a BGPFilter rule's
	// interface pattern names.
	NextHopIn []netip.Prefix `json:"nextHopIn,omitempty"`
	// KeepNextHop leaves the next hop unchanged, SelfNextHop sets it to
	// this node's address (export only).
	KeepNextHop bool   `json:"keepNextHop,omitempty"`
	SelfNextHop bool   `json:"selfNextHop,omitempty"`
	Action      Action `json:"action,omitempty"`
}

// Policy is the compiled import and export rules of a speaker.
type Policy struct {
	PrefixSets   []PrefixSet   `json:"prefixSets,omitempty"`
	NeighborSets []NeighborSet `json:"neighborSets,omitempty"`
	Export       []Statement   `json:"export"`
	Import       []Statement   `json:"import"`
}

// Input is everything the rules depend on.
type Input struct {
	// Local is this node's identity; a ClusterID makes it a route
	// reflector.
	Local peers.Local
	// Peers are the desired sessions; Filters their BGPFilter names (by
	// Peer.Key), as peers.Compute returns them.
	Peers   []peers.Peer
	Filters map[string][]string
	// BGPFilters are all BGPFilter resources.
	BGPFilters []v3.BGPFilter
	// Interfaces are the subnets of this node's interfaces by name, those
	// of BGPConfiguration ignoredInterfaces left out.
	Interfaces map[string][]netip.Prefix
}

// Names of the fixed statements and sets.
const (
	keepNextHopSet = "palisade-keep-next-hop"
	selfNextHopSet = "palisade-self-next-hop"
	ibgpSet        = "palisade-ibgp-peers"
	noReflectSet   = "palisade-no-reflect"
)

// Compile returns the policy. A BGPPeer naming a BGPFilter that does not
// exist, and a rule that cannot be read, are reported and skipped (the
// others still apply).
func Compile(in Input) (Policy, []error) {
	c := compiler{prefixSets: map[string]PrefixSet{}}
	var errs []error
	filters := make(map[string]*v3.BGPFilter, len(in.BGPFilters))
	for i := range in.BGPFilters {
		filters[in.BGPFilters[i].Name] = &in.BGPFilters[i]
	}
	ps := append([]peers.Peer(nil), in.Peers...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Key() < ps[j].Key() })

	// Next hops kept or set to self first: it changes the route and
	// goes on.
	var keep, self, ibgp, noReflect []netip.Addr
	for _, p := range ps {
		if p.KeepOriginalNextHop {
			keep = append(keep, p.Address)
		}
		if p.NextHopSelf {
			self = append(self, p.Address)
		}
		if !p.EBGP && !sameCluster(in.Local, p) {
			ibgp = append(ibgp, p.Address)
		} else {
			noReflect = append(noReflect, p.Address)
		}
	}
	if len(keep) > 0 {
		c.neighbors(keepNextHopSet, keep)
		c.pol.Export = append(c.pol.Export, Statement{Name: "palisade-keep-next-hop", Neighbors: keepNextHopSet, KeepNextHop: true})
	}
	if len(self) > 0 {
		c.neighbors(selfNextHopSet, self)
		c.pol.Export = append(c.pol.Export, Statement{Name: "palisade-self-next-hop", Neighbors: selfNextHopSet, SelfNextHop: true})
	}

	// Each session's BGPFilters, in order, before the defaults.
	for _, p := range ps {
		names := in.Filters[p.Key()]
		if len(names) == 0 {
			continue
		}
		set := peerSetPrefix + p.Address.String()
		who := p.Address.String()
		if p.Port != 0 {
			who = p.Key()
		}
		used := false
		for _, name := range names {
			f, ok := filters[name]
			if !ok {
				errs = append(errs, fmt.Errorf("session with %s: BGPFilter %q does not exist; its rules are not applied", who, name))
				continue
			}
			for _, d := range []struct {
				dir   string
				fam   Family
				rules []rule
				out   *[]Statement
			}{
				{"export", IPv4, rulesV4(f.Spec.ExportV4), &c.pol.Export},
				{"export", IPv6, rulesV6(f.Spec.ExportV6), &c.pol.Export},
				{"import", IPv4, rulesV4(f.Spec.ImportV4), &c.pol.Import},
				{"import", IPv6, rulesV6(f.Spec.ImportV6), &c.pol.Import},
			} {
				for i, r := range d.rules {
					base := fmt.Sprintf("palisade-%s-%s-%s-v%s-%d", p.Address, f.Name, d.dir, d.fam[3:], i)
					sts, err := c.rule(base, f.Name, d.dir, d.fam, i, r, set, in.Interfaces)
					if err != nil {
						errs = append(errs, fmt.Errorf("bgpfilter %q: spec.%s%s[%d]: %w", f.Name, d.dir, strings.ToUpper(string(d.fam[2:])), i, err))
						continue
					}
					*d.out = append(*d.out, sts...)
					used = used || len(sts) > 0
				}
			}
		}
		if used {
			c.neighbors(set, []netip.Addr{p.Address})
		}
	}

	// The defaults: our own routes go to everyone; a route reflector
	// passes iBGP routes on to iBGP peers (GoBGP's reflection rules decide
	// which) other than the reflectors of its own cluster; nothing else.
	// Reflection is written as a rejection for the few sessions that get
	// no reflected routes (eBGP peers, the cluster's other reflectors)
	// before an acceptance for all: GoBGP scans a neighbor set linearly
	// for every route it sends every peer, and a set of every client made
	// a reflector's convergence cubic in its clients (docs/scale.md).
	// The set of the sessions that do get them stays, named by no
	// statement, for ChangedPeers.
	c.pol.Export = append(c.pol.Export, Statement{Name: "palisade-own-routes", Source: SourceLocal, Action: ActionAccept})
	if in.Local.ClusterID != "" && len(ibgp) > 0 {
		c.neighbors(ibgpSet, ibgp)
		if len(noReflect) > 0 {
			c.neighbors(noReflectSet, noReflect)
			c.pol.Export = append(c.pol.Export, Statement{Name: "palisade-no-reflect", Source: SourceInternal, Neighbors: noReflectSet, Action: ActionReject})
		}
		c.pol.Export = append(c.pol.Export, Statement{Name: "palisade-reflect", Source: SourceInternal, Action: ActionAccept})
	}

	for _, s := range c.prefixSets {
		c.pol.PrefixSets = append(c.pol.PrefixSets, s)
	}
	sort.Slice(c.pol.PrefixSets, func(i, j int) bool { return c.pol.PrefixSets[i].Name < c.pol.PrefixSets[j].Name })
	sort.Slice(c.pol.NeighborSets, func(i, j int) bool { return c.pol.NeighborSets[i].Name < c.pol.NeighborSets[j].Name })
	if c.pol.Import == nil {
		c.pol.Import = []Statement{}
	}
	return c.pol, errs
}

// sameCluster reports whether p is a route reflector of this node's own
// cluster: an iBGP session of a reflector that is neither a client nor
// part of the mesh (peers.Compute makes every other iBGP peer of a
// reflector its client). Such a peer is sent this node's own routes,
// never reflected ones: as RFC 4456 has it,
// a reflector drops a route whose CLUSTER_LIST holds its cluster ID, but
// GoBGP neither adds the CLUSTER_LIST towards a non-client nor checks it
// on receipt. Taken, such a route wins over the client's own by router
// ID, and each reflector would route the clients' blocks through the
// other: a restart of one then changes and withdraws what the other
// tells its clients.
func sameCluster(l peers.Local, p peers.Peer) bool {
	return l.ClusterID != "" && !p.EBGP && !p.RRClient && p.Type != peers.TypeMesh
}

type compiler struct {
	pol        Policy
	prefixSets map[string]PrefixSet
}

func (c *compiler) neighbors(name string, addrs []netip.Addr) {
	c.pol.NeighborSets = append(c.pol.NeighborSets, NeighborSet{Name: name, Addresses: addrs})
}

// rule is a BGPFilter rule of either family.
type rule struct {
	cidr     string
	min, max *int32
	source   v3.BGPFilterMatchSource
	iface    string
	op       v3.BGPFilterMatchOperator
	action   v3.BGPFilterAction
}

func rulesV4(rs []v3.BGPFilterRuleV4) []rule {
	out := make([]rule, 0, len(rs))
	for _, r := range rs {
		x := rule{cidr: r.CIDR, source: r.Source, iface: r.Interface, op: r.MatchOperator, action: r.Action}
		if r.PrefixLength != nil {
			x.min, x.max = r.PrefixLength.Min, r.PrefixLength.Max
		}
		out = append(out, x)
	}
	return out
}

func rulesV6(rs []v3.BGPFilterRuleV6) []rule {
	out := make([]rule, 0, len(rs))
	for _, r := range rs {
		x := rule{cidr: r.CIDR, source: r.Source, iface: r.Interface, op: r.MatchOperator, action: r.Action}
		if r.PrefixLength != nil {
			x.min, x.max = r.PrefixLength.Min, r.PrefixLength.Max
		}
		out = append(out, x)
	}
	return out
}

// rule compiles one BGPFilter rule into statements for the session whose
// neighbour set is set. A rule that can never match compiles to none; a
// rule that must match routes of two origins compiles to two.
func (c *compiler) rule(base, filter, dir string, fam Family, idx int, r rule, set string, ifaces map[string][]netip.Prefix) ([]Statement, error) {
	st := Statement{Name: base, Family: fam, Neighbors: set}
	switch r.action {
	case v3.BGPFilterAccept:
		st.Action = ActionAccept
	case v3.BGPFilterReject:
		st.Action = ActionReject
	default:
		return nil, fmt.Errorf("action %q: want Accept or Reject", r.action)
	}
	if r.cidr != "" {
		pfx, err := netip.ParsePrefix(r.cidr)
		if err != nil {
			return nil, fmt.Errorf("cidr %q: %w", r.cidr, err)
		}
		if (fam == IPv4) != pfx.Addr().Is4() {
			return nil, fmt.Errorf("cidr %q is not an %s prefix", r.cidr, fam)
		}
		pfx = pfx.Masked()
		bits := pfx.Addr().BitLen()
		lo, hi := pfx.Bits(), bits
		if r.min != nil && int(*r.min) > lo {
			lo = int(*r.min)
		}
		if r.max != nil && int(*r.max) < hi {
			hi = int(*r.max)
		}
		var invert bool
		switch r.op {
		case v3.MatchOperatorIn:
		case v3.MatchOperatorNotIn:
			invert = true
		case v3.MatchOperatorEqual, v3.MatchOperatorNotEqual:
			// Exactly the CIDR; a prefixLength range matters only when
			// it leaves out the CIDR's own length.
			if lo > pfx.Bits() || hi < pfx.Bits() {
				lo, hi = 1, 0
			} else {
				lo, hi = pfx.Bits(), pfx.Bits()
			}
			invert = r.op == v3.MatchOperatorNotEqual
		default:
			return nil, fmt.Errorf("matchOperator %q: want Equal, NotEqual, In or NotIn", r.op)
		}
		if lo > hi {
			// An empty range: the rule never matches, or (inverted)
			// matches everything of the family.
			if !invert {
				return nil, nil
			}
		} else {
			name := fmt.Sprintf("palisade-%s-%s-v%s-%d", filter, dir, fam[3:], idx)
			c.prefixSets[name] = PrefixSet{Name: name, Prefix: pfx, MinLen: lo, MaxLen: hi}
			st.Prefixes, st.NotPrefixes = name, invert
		}
	} else if r.op != "" {
		return nil, fmt.Errorf("matchOperator %q without a cidr", r.op)
	}
	sources := []Source{""}
	if r.source != "" {
		if r.source != v3.BGPFilterSourceRemotePeers {
			return nil, fmt.Errorf("source %q: want RemotePeers", r.source)
		}
		sources = []Source{SourceInternal, SourceExternal}
	}
	if r.iface != "" {
		if _, err := path.Match(r.iface, ""); err != nil {
			return nil, fmt.Errorf("interface %q: %w", r.iface, err)
		}
		for _, name := range sortedKeys(ifaces) {
			if ok, _ := path.Match(r.iface, name); !ok {
				continue
			}
			for _, p := range ifaces[name] {
				if p.Addr().Is4() == (fam == IPv4) {
					st.NextHopIn = append(st.NextHopIn, p)
				}
			}
		}
		if len(st.NextHopIn) == 0 {
			// No interface of the node matches: neither does a route.
			return nil, nil
		}
		// Only a learned route has an interface (the one its next hop is
		// reached through); the node's own routes have none.
		sources = []Source{SourceInternal, SourceExternal}
	}
	out := make([]Statement, 0, len(sources))
	for _, src := range sources {
		s := st
		s.Source = src
		if src != "" {
			s.Name += "-" + string(src)
		}
		out = append(out, s)
	}
	return out, nil
}

func sortedKeys(m map[string][]netip.Prefix) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ChangedPeers lists the sessions (by address) whose treatment differs
// between two policies: their own statements (or the prefix sets those
// name) changed, or they joined or left a set every session's statements
// share (next hops kept, reflection). losing are those that may lose
// routes they were sent (a Reject added or an Accept removed): they need
// their session made again for withdrawals to go, since a soft reset only
// sends what is now accepted.
func ChangedPeers(old, new Policy) (changed, losing []netip.Addr) {
	o, n := byNeighbor(old), byNeighbor(new)
	seen := map[string]bool{}
	for _, k := range append(sortedStmtKeys(o), sortedStmtKeys(n)...) {
		if seen[k] {
			continue
		}
		seen[k] = true
		os, ns := o[k], n[k]
		if slicesEqual(os, ns) {
			continue
		}
		a, err := netip.ParseAddr(strings.TrimPrefix(k, peerSetPrefix))
		if err != nil {
			continue
		}
		changed = append(changed, a)
		if lostAccept(os, ns) || lostAccept(inverted(ns), inverted(os)) {
			losing = append(losing, a)
		}
	}
	in := map[netip.Addr]bool{}
	for _, a := range changed {
		in[a] = true
	}
	for _, name := range []string{keepNextHopSet, ibgpSet} {
		om, nm := members(old, name), members(new, name)
		for a := range om {
			if !nm[a] && !in[a] {
				in[a] = true
				changed = append(changed, a)
			}
		}
		for a := range nm {
			if !om[a] && !in[a] {
				in[a] = true
				changed = append(changed, a)
			}
		}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].Less(changed[j]) })
	return changed, losing
}

const peerSetPrefix = "palisade-peer-"

func members(p Policy, set string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range p.NeighborSets {
		if s.Name == set {
			for _, a := range s.Addresses {
				out[a] = true
			}
		}
	}
	return out
}

// byNeighbor groups the export statements of per-session sets, each
// written out with the prefix set it names.
func byNeighbor(p Policy) map[string][]string {
	sets := map[string]PrefixSet{}
	for _, s := range p.PrefixSets {
		sets[s.Name] = s
	}
	out := map[string][]string{}
	for _, s := range p.Export {
		if strings.HasPrefix(s.Neighbors, peerSetPrefix) {
			out[s.Neighbors] = append(out[s.Neighbors], fmt.Sprint(s.Action, s, sets[s.Prefixes]))
		}
	}
	return out
}

func sortedStmtKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lostAccept reports whether an Accept statement of old is missing from
// new (statements as byNeighbor writes them, led by their action).
func lostAccept(old, new []string) bool {
	for _, s := range old {
		if !strings.HasPrefix(s, string(ActionAccept)) {
			continue
		}
		found := false
		for _, t := range new {
			found = found || s == t
		}
		if !found {
			return true
		}
	}
	return false
}

// inverted swaps the leading Accept and Reject, so that lostAccept over
// it finds an added Reject.
func inverted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		switch {
		case strings.HasPrefix(s, string(ActionAccept)):
			s = string(ActionReject) + strings.TrimPrefix(s, string(ActionAccept))
		case strings.HasPrefix(s, string(ActionReject)):
			s = string(ActionAccept) + strings.TrimPrefix(s, string(ActionReject))
		}
		out[i] = s
	}
	return out
}

// Plain reports whether the session with the peer at a gets the default
// rules only: no BGPFilter, next hop unchanged, and (for a route
// reflector's client) every reflected route: the peer is in no neighbour
// set but that of the iBGP sessions. A route reflector's fast path may
// hold such a session (node/bgp/reflector).
func Plain(p Policy, a netip.Addr) bool {
	for _, s := range p.NeighborSets {
		if s.Name == ibgpSet {
			continue
		}
		if slices.Contains(s.Addresses, a) {
			return false
		}
	}
	return true
}
