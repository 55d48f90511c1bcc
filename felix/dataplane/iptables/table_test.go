package iptables

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/felix/rules"
)

func input(ifaces ...string) rules.Input {
	cfg := calc.MergeConfig(nil, nil)
	pid := calc.PolicyID{Tier: "default", Name: "allow-tcp"}
	in := rules.Input{Config: cfg, IPVersion: 4,
		Policies: map[calc.PolicyID]*calc.Policy{pid: {ID: pid, Ingress: true,
			Inbound: []calc.Rule{{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 80, Max: 80}}}}}},
		Profiles:  map[string]*calc.Profile{},
		Endpoints: map[calc.EndpointID]*calc.Endpoint{},
	}
	for i, name := range ifaces {
		id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: name}
		in.Endpoints[id] = &calc.Endpoint{ID: id, InterfaceName: name,
			IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 65, 0, byte(i + 1)}), 32)},
			Tiers:    []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{pid}}}}
	}
	return in
}

type driver struct {
	t      testing.TB
	ns     nstest.NS
	b      Backend
	tables []*Table
}

func newDriver(t testing.TB, b Backend) *driver {
	nstest.RequireRoot(t)
	if !b.Available(4) {
		t.Skipf("backend %s: no iptables commands", b)
	}
	ns := nstest.New(t, nstest.Prefix(), "node")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	d := &driver{t: t, ns: ns, b: b}
	for _, set := range []string{"cali40masq-ipam-pools", "cali40all-ipam-pools"} {
		ns.MustRun(t, "ipset", "create", set, "hash:net")
	}
	for _, name := range rules.TableNames() {
		d.tables = append(d.tables, NewTable(name, 4, b, run, log.WithField("test", t.Name())))
	}
	return d
}

// set renders in and applies it; it returns how many tables were written.
func (d *driver) set(in rules.Input, mode string) int {
	d.t.Helper()
	rs := rules.Render(in)
	n := 0
	for _, t := range d.tables {
		t.SetChains(rs.Tables[t.Name])
		t.SetJumps(rs.Jumps, mode)
		wrote, err := t.Apply(context.Background())
		if err != nil {
			d.t.Fatalf("apply %s: %v", t.Name, err)
		}
		if wrote {
			n++
		}
	}
	// As felix's driver: warm processes start once the apply is done.
	d.tables[0].run.WarmUp()
	return n
}

func (d *driver) refresh() int {
	d.t.Helper()
	n := 0
	for _, t := range d.tables {
		t.Invalidate()
		wrote, err := t.Apply(context.Background())
		if err != nil {
			d.t.Fatalf("refresh %s: %v", t.Name, err)
		}
		if wrote {
			n++
		}
	}
	return n
}

func (d *driver) save(table string) string {
	save, _ := d.b.Commands(4)
	return d.ns.MustRun(d.t, save, "-t", table)
}

func (d *driver) iptables(args ...string) {
	d.t.Helper()
	d.ns.MustRun(d.t, append([]string{"iptables-" + string(d.b)}, args...)...)
}

// chainRules lists the rules of a chain as iptables-save prints them.
func chainRules(save, chain string) []string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, l)
		}
	}
	return out
}

func wantHashes(t *testing.T, save string, c rules.Chain) {
	t.Helper()
	got := chainRules(save, c.Name)
	if len(got) != len(c.Rules) {
		t.Fatalf("chain %s: %d rules in the kernel, want %d:\n%s", c.Name, len(got), len(c.Rules), strings.Join(got, "\n"))
	}
	for i, r := range c.Rules {
		if !strings.Contains(got[i], "cali:"+r.Hash) {
			t.Errorf("chain %s rule %d: %q lacks hash %s", c.Name, i, got[i], r.Hash)
		}
	}
}

func findChain(rs *rules.Ruleset, table, name string) rules.Chain {
	for _, c := range rs.Tables[table] {
		if c.Name == name {
			return c
		}
	}
	return rules.Chain{}
}

func TestTable(t *testing.T) {
	for _, b := range []Backend{NFT, Legacy} {
		t.Run(string(b), func(t *testing.T) {
			d := newDriver(t, b)
			// Another program's rules and chain, which must survive.
			d.iptables("-N", "OTHER")
			d.iptables("-A", "OTHER", "-s", "198.18.0.9", "-j", "ACCEPT")
			d.iptables("-A", "INPUT", "-s", "198.18.0.8", "-j", "OTHER")

			in := input("cali1", "cali2")
			if n := d.set(in, Insert); n != 4 {
				t.Fatalf("first apply wrote %d tables, want 4", n)
			}
			if n := d.set(in, Insert); n != 0 {
				t.Errorf("second apply of the same rules wrote %d tables, want 0", n)
			}
			rs := rules.Render(in)
			save := d.save("filter")
			for _, c := range rs.Tables["filter"] {
				wantHashes(t, save, c)
			}
			inRules := chainRules(save, "INPUT")
			if len(inRules) != 2 || !strings.Contains(inRules[0], "-j cali-INPUT") || !strings.Contains(inRules[1], "-j OTHER") {
				t.Errorf("INPUT = %q, want our jump first then OTHER's", inRules)
			}

			t.Run("tamper", func(t *testing.T) {
				fw := findChain(rs, "filter", "cali-tw-cali1")
				d.iptables("-D", "cali-tw-cali1", "3")
				d.iptables("-I", "INPUT", "1", "-s", "198.18.0.7", "-j", "ACCEPT")
				if n := d.refresh(); n != 1 {
					t.Errorf("refresh wrote %d tables, want 1 (filter)", n)
				}
				save := d.save("filter")
				wantHashes(t, save, fw)
				inRules := chainRules(save, "INPUT")
				if len(inRules) != 3 || !strings.Contains(inRules[0], "-j cali-INPUT") || !strings.Contains(inRules[1], "198.18.0.7") {
					t.Errorf("INPUT = %q, want our jump back on top, then the others' rules", inRules)
				}
				if !slices.ContainsFunc(chainRules(save, "OTHER"), func(s string) bool { return strings.Contains(s, "198.18.0.9") }) {
					t.Error("the OTHER chain lost its rule")
				}
				d.iptables("-D", "INPUT", "-s", "198.18.0.7", "-j", "ACCEPT")
			})

			t.Run("endpoint removed", func(t *testing.T) {
				in := input("cali1")
				if n := d.set(in, Insert); n != 1 {
					t.Errorf("apply wrote %d tables, want 1", n)
				}
				save := d.save("filter")
				if strings.Contains(save, "cali-tw-cali2") || strings.Contains(save, "cali-fw-cali2") {
					t.Errorf("chains of the removed endpoint are still there:\n%s", save)
				}
				wantHashes(t, save, findChain(rules.Render(in), "filter", rules.ChainToWlDispatch))
				// A stale chain left by an earlier run is removed at refresh.
				d.iptables("-N", "cali-stale")
				d.iptables("-A", "cali-stale", "-j", "ACCEPT")
				d.refresh()
				if save := d.save("filter"); strings.Contains(save, "cali-stale") {
					t.Errorf("stale chain cali-stale survived a refresh")
				}
			})

			t.Run("append mode", func(t *testing.T) {
				in := input("cali1")
				in.Config.ChainInsertMode = Append
				d.set(in, Append)
				inRules := chainRules(d.save("filter"), "INPUT")
				if len(inRules) != 2 || !strings.Contains(inRules[1], "-j cali-INPUT") {
					t.Errorf("INPUT = %q, want our jump last", inRules)
				}
				// Someone appends after us: in Append mode that is fine.
				d.iptables("-A", "INPUT", "-s", "198.18.0.6", "-j", "ACCEPT")
				if n := d.refresh(); n != 0 {
					t.Errorf("refresh in Append mode with a rule after ours wrote %d tables, want 0", n)
				}
			})
		})
	}
}

// TestTableIPv6 programs the IPv6 ruleset (nft: Debian ships no legacy
// ip6tables here) and checks that a second apply writes nothing.
func TestTableIPv6(t *testing.T) {
	nstest.RequireRoot(t)
	if !NFT.Available(6) {
		t.Skip("no ip6tables-nft")
	}
	ns := nstest.New(t, nstest.Prefix(), "node6")
	for _, set := range []string{"cali60masq-ipam-pools", "cali60all-ipam-pools"} {
		ns.MustRun(t, "ipset", "create", set, "hash:net", "family", "inet6")
	}
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	in := input("cali1")
	in.IPVersion = 6
	rs := rules.Render(in)
	for round, wantWrites := range []int{4, 0} {
		writes := 0
		for _, name := range rules.TableNames() {
			tb := NewTable(name, 6, NFT, run, log.WithField("test", t.Name()))
			tb.SetChains(rs.Tables[name])
			tb.SetJumps(rs.Jumps, Insert)
			wrote, err := tb.Apply(context.Background())
			if err != nil {
				t.Fatalf("round %d table %s: %v", round, name, err)
			}
			if wrote {
				writes++
			}
		}
		if writes != wantWrites {
			t.Errorf("round %d wrote %d tables, want %d", round, writes, wantWrites)
		}
	}
	save := ns.MustRun(t, "ip6tables-nft-save", "-t", "filter")
	wantHashes(t, save, findChain(rs, "filter", "cali-tw-cali1"))
	if !strings.Contains(save, "-A INPUT -m comment --comment \"cali:") {
		t.Errorf("no jump in ip6tables INPUT:\n%s", save)
	}
}
