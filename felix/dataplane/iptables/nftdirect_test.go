package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/felix/rules"
)

// richInput has n workload endpoints (a dispatch tree beyond 16), two
// tiers (one ending in Pass), a profile, and a host endpoint.
func richInput(n int) rules.Input {
	in := input()
	pass := calc.PolicyID{Tier: "security", Name: "gate"}
	in.Policies[pass] = &calc.Policy{ID: pass, Ingress: true, Egress: true,
		Inbound:  []calc.Rule{{Action: calc.Pass}},
		Outbound: []calc.Rule{{Action: calc.Allow}}}
	in.Profiles["kns.a"] = &calc.Profile{Name: "kns.a", Inbound: []calc.Rule{{Action: calc.Allow}}, Outbound: []calc.Rule{{Action: calc.Allow}}}
	pid := calc.PolicyID{Tier: "default", Name: "allow-tcp"}
	for i := range n {
		id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: fmt.Sprint("w", i)}
		in.Endpoints[id] = &calc.Endpoint{ID: id, InterfaceName: fmt.Sprintf("cali%02x%d", i*7%256, i), Profiles: []string{"kns.a"},
			IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 65, 1, byte(i + 1)}), 32)},
			Tiers: []calc.TierPolicies{
				{Name: "security", DefaultAction: calc.Pass, Ingress: []calc.PolicyID{pass}, Egress: []calc.PolicyID{pass}},
				{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{pid}},
			}}
	}
	hid := calc.EndpointID{Kind: calc.HostEndpoint, Name: "eth0"}
	in.Endpoints[hid] = &calc.Endpoint{ID: hid, InterfaceName: "eth0",
		Tiers: []calc.TierPolicies{{Name: "default", DefaultAction: calc.Deny, Ingress: []calc.PolicyID{pid}}}}
	return in
}

// uncommented drops iptables-save's comment lines (they carry the time).
func uncommented(save string) string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDirectMatchesRestore writes a whole table with iptables-nft-restore,
// then writes every chain the direct writer can encode again through
// netlink, in one batch larger than a netlink socket's default buffer:
// iptables-nft-save (ip6tables-nft-save) must print exactly the same
// table, so the direct rules are the ones iptables-nft itself would have
// written.
func TestDirectMatchesRestore(t *testing.T) {
	for _, family := range []int{4, 6} {
		t.Run(fmt.Sprint("IPv", family), func(t *testing.T) { directMatchesRestore(t, family) })
	}
}

func directMatchesRestore(t *testing.T, family int) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "direct")
	inet := map[int]string{4: "inet", 6: "inet6"}[family]
	for _, set := range []string{"masq-ipam-pools", "all-ipam-pools"} {
		ns.MustRun(t, "ipset", "create", fmt.Sprintf("cali%d0%s", family, set), "hash:net", "family", inet)
	}
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	in := richInput(40)
	in.IPVersion = family
	rs := rules.Render(in)
	for _, name := range rules.TableNames() {
		tb := NewTable(name, family, NFT, run, log.WithField("test", t.Name()))
		tb.Close()
		tb.direct = nil // restore only
		tb.SetChains(rs.Tables[name])
		tb.SetJumps(rs.Jumps, Insert)
		if _, err := tb.Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
		tb.Close()
	}
	save, _ := NFT.Commands(family)
	before := uncommented(ns.MustRun(t, save, "-t", "filter"))

	w, err := newNFTDirect(run, family, "filter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	var chains []encodedChain
	kinds := map[string]int{}
	size := 0
	for _, c := range rs.Tables["filter"] {
		if enc, err := w.encodeChain(c.Name, c.Rules); err == nil {
			chains = append(chains, enc)
			for _, r := range enc.rules {
				size += len(r.exprs)
			}
			for _, p := range []string{rules.PrefixToWorkload, rules.PrefixFromWorkload, rules.ChainFromWlDispatch, rules.ChainToWlDispatch, rules.PrefixFromHost} {
				if strings.HasPrefix(c.Name, p) {
					kinds[p]++
				}
			}
		}
	}
	for _, p := range []string{rules.PrefixToWorkload, rules.PrefixFromWorkload, rules.ChainFromWlDispatch, rules.ChainToWlDispatch, rules.PrefixFromHost} {
		if kinds[p] == 0 {
			t.Errorf("no %s chain is encodable: the direct writer would never be used for them", p)
		}
	}
	if size < 256<<10 {
		t.Errorf("the batch is only %d bytes: it does not test a raised send buffer", size)
	}
	if err := w.write(chains, nil); err != nil {
		t.Fatal(err)
	}
	after := uncommented(ns.MustRun(t, save, "-t", "filter"))
	if after != before {
		a, b := strings.Split(before, "\n"), strings.Split(after, "\n")
		for _, l := range b {
			if !slices.Contains(a, l) {
				t.Errorf("direct write printed %q", l)
			}
		}
		for _, l := range a {
			if !slices.Contains(b, l) {
				t.Errorf("restore printed %q, the direct write did not", l)
			}
		}
	}
	if len(chains) < 80 {
		t.Errorf("only %d chains rewritten directly, want the 80 endpoint chains and more", len(chains))
	}
}

// TestDirectUsedForEndpoints checks when a table takes the direct path: a
// new endpoint (its chains and the dispatch) goes through netlink and is
// in the kernel; a policy change (a multiport match) goes through
// iptables-nft-restore.
func TestDirectUsedForEndpoints(t *testing.T) {
	d := newDriver(t, NFT)
	filter := d.tables[slices.IndexFunc(d.tables, func(t *Table) bool { return t.Name == "filter" })]
	in := richInput(20)
	d.set(in, Insert)
	first := filter.directWrites

	more := richInput(21)
	if d.set(more, Insert) == 0 {
		t.Fatal("a new endpoint wrote nothing")
	}
	if filter.directWrites != first+1 {
		t.Errorf("a new endpoint: %d direct writes, want %d", filter.directWrites, first+1)
	}
	save := d.save("filter")
	iface := more.Endpoints[calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: "w20"}].InterfaceName
	for _, want := range []string{":cali-tw-" + iface + " ", ":cali-fw-" + iface + " ", "-o " + iface + " -m comment", "-g cali-tw-" + iface + "\n"} {
		if !strings.Contains(save, want) {
			t.Errorf("after the direct write the table lacks %q", want)
		}
	}
	// Read back: nothing differs.
	if n := d.refresh(); n != 0 {
		t.Errorf("refresh after a direct write rewrote %d tables", n)
	}

	// A policy with a port: restore.
	pid := calc.PolicyID{Tier: "default", Name: "allow-tcp"}
	more.Policies[pid].Inbound[0].DstPorts = []calc.PortRange{{Min: 81, Max: 81}}
	n := filter.directWrites
	d.set(more, Insert)
	if filter.directWrites != n {
		t.Error("a policy chain with a port match went through the direct writer")
	}
	if !strings.Contains(d.save("filter"), "--dports 81") {
		t.Error("the policy change is not in the kernel")
	}

	// An endpoint removed: its chains deleted directly.
	n = filter.directWrites
	less := richInput(20)
	less.Policies[pid] = more.Policies[pid]
	d.set(less, Insert)
	if filter.directWrites != n+1 {
		t.Error("removing an endpoint did not go through the direct writer")
	}
	if strings.Contains(d.save("filter"), "cali-tw-"+iface) {
		t.Errorf("the removed endpoint's chain %s is still there", "cali-tw-"+iface)
	}
}

// TestDirectSplit checks how a table divides a write between netlink and
// iptables-nft-restore. A first write sends what the direct writer
// encodes over netlink (creating the table when iptables-nft has not yet)
// and the rest (a policy chain with a port match) through restore, and
// every table prints exactly as after a restore-only write. Later, a
// change with a chain only restore can write goes whole through one
// restore. On a first write, a new chain for restore that jumps to a new
// chain the direct writer could encode takes that one along (it must
// exist first).
func TestDirectSplit(t *testing.T) {
	filterOf := func(d *driver) *Table {
		return d.tables[slices.IndexFunc(d.tables, func(t *Table) bool { return t.Name == "filter" })]
	}
	ref := newDriver(t, NFT)
	for _, tb := range ref.tables {
		tb.Close()
		tb.direct = nil
	}
	d := newDriver(t, NFT)
	filter := filterOf(d)
	in := richInput(20)
	d.set(in, Insert)
	ref.set(in, Insert)
	if filter.directWrites != 1 {
		t.Fatalf("the first write made %d direct writes, want 1", filter.directWrites)
	}
	lines := func(save string) []string {
		l := strings.Split(uncommented(save), "\n")
		slices.Sort(l)
		return l
	}
	for _, table := range rules.TableNames() {
		if got, want := lines(d.save(table)), lines(ref.save(table)); !slices.Equal(got, want) {
			t.Errorf("table %s: a split write prints differently from one restore:\n%s\nwant:\n%s", table, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if n := filterOf(d).directWrites + d.tables[0].directWrites; n < 2 {
		t.Errorf("the raw table was not written directly on its first write")
	}
	if n := d.refresh(); n != 0 {
		t.Errorf("refresh after a split write rewrote %d tables", n)
	}

	// An existing restore-only chain changes along with the dispatch.
	pid := calc.PolicyID{Tier: "default", Name: "allow-tcp"}
	more := richInput(21)
	more.Policies[pid].Inbound[0].DstPorts = []calc.PortRange{{Min: 81, Max: 81}}
	n := filter.directWrites
	d.set(more, Insert)
	if filter.directWrites != n {
		t.Error("a change to an existing policy chain was split from the endpoint change")
	}
	save := d.save("filter")
	iface := more.Endpoints[calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: "w20"}].InterfaceName
	for _, want := range []string{"--dports 81", ":cali-tw-" + iface + " "} {
		if !strings.Contains(save, want) {
			t.Errorf("after the policy and endpoint change the table lacks %q", want)
		}
	}

	// A first write where a chain for restore jumps to a new encodable one.
	fresh := newDriver(t, NFT)
	tb := filterOf(fresh)
	small := rules.Render(richInput(2))
	tb.SetJumps(small.Jumps, Insert)
	tb.SetChains(append(small.Tables["filter"],
		rules.Chain{Name: "cali-t-ports", Rules: []rules.Rule{{Match: "-p tcp -m multiport --dports 1,2", Action: "cali-t-leaf", Hash: "PPPPPPPPPPPPPPPP"}}},
		rules.Chain{Name: "cali-t-leaf", Rules: []rules.Rule{{Action: "ACCEPT", Hash: "LLLLLLLLLLLLLLLL"}}},
		rules.Chain{Name: "cali-t-top", Rules: []rules.Rule{{Action: "cali-t-ports", Hash: "TTTTTTTTTTTTTTTT"}}}))
	if _, err := tb.Apply(context.Background()); err != nil {
		t.Fatalf("a new chain for restore jumping to a new encodable one: %v", err)
	}
	if tb.directWrites != 1 {
		t.Errorf("%d direct writes, want 1", tb.directWrites)
	}
	save = fresh.save("filter")
	for _, c := range []string{"cali-t-ports", "cali-t-leaf", "cali-t-top"} {
		if !strings.Contains(save, "-A "+c+" ") {
			t.Errorf("chain %s is not in the kernel", c)
		}
	}
}

// BenchmarkNewEndpoint times the table write of one new endpoint (its
// chains and the dispatch) on a node of 100, through netlink and through
// a waiting iptables-nft-restore; x/ref is the ratio of their means.
// Before each write the machine idles 20 ms, as between two pods; the
// netlink write's p50 and p99 over 100 endpoints are reported too, and
// the same writes made back to back (warm-*): on this VM a kernel call
// after an idle spell costs several times one made right after another.
func BenchmarkNewEndpoint(b *testing.B) {
	timeWrites := func(direct bool, n int, idle time.Duration) []time.Duration {
		d := newDriver(b, NFT)
		filter := d.tables[slices.IndexFunc(d.tables, func(t *Table) bool { return t.Name == "filter" })]
		if !direct {
			filter.direct.close()
			filter.direct = nil
		}
		small, big := richInput(100), richInput(101)
		d.set(small, Insert)
		var took []time.Duration
		for i := range 2 * n {
			in := big
			if i%2 == 1 {
				in = small
			}
			rs := rules.Render(in)
			filter.SetChains(rs.Tables["filter"])
			if i%2 == 0 {
				time.Sleep(idle) // for restore, also: the warm process is ready
			}
			start := time.Now()
			if _, err := filter.Apply(context.Background()); err != nil {
				b.Fatal(err)
			}
			if i%2 == 0 {
				took = append(took, time.Since(start))
			}
			filter.run.WarmUp() // as felix's driver does after an apply
		}
		return took
	}
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum) / float64(len(d))
	}
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(float64(len(s)-1)*p)].Microseconds()) / 1000
	}
	netlink := timeWrites(true, 100, 20*time.Millisecond)
	warm := timeWrites(true, 100, 0)
	restore := timeWrites(false, 20, 20*time.Millisecond)
	b.ReportMetric(mean(netlink)/1e6, "netlink-ms")
	b.ReportMetric(mean(restore)/1e6, "restore-ms")
	b.ReportMetric(pct(netlink, 0.5), "netlink-p50-ms")
	b.ReportMetric(pct(netlink, 0.99), "netlink-p99-ms")
	b.ReportMetric(pct(warm, 0.5), "warm-p50-ms")
	b.ReportMetric(pct(warm, 0.99), "warm-p99-ms")
	b.ReportMetric(mean(netlink)/mean(restore), "x/ref")
}

// TestDirectRefusedWritesNothing sends a batch the kernel refuses (a jump
// to a chain that does not exist): the write fails and none of it lands,
// not even the chain created before the bad rule. The same writer's next
// batch lands: no reply of the refused one is taken for its answer.
func TestDirectRefusedWritesNothing(t *testing.T) {
	d := newDriver(t, NFT)
	d.set(input("cali1"), Insert)
	w, err := newNFTDirect(d.tables[0].run, 4, "filter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ok, err := w.encodeChain("cali-new-ok", []rules.Rule{{Action: "ACCEPT", Hash: "AAAAAAAAAAAAAAAA"}})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := w.encodeChain("cali-new-bad", []rules.Rule{{Action: "cali-missing", Hash: "BBBBBBBBBBBBBBBB"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.write([]encodedChain{ok, bad}, nil); err == nil {
		t.Fatal("a jump to a missing chain was accepted")
	}
	if save := d.save("filter"); strings.Contains(save, "cali-new-ok") || strings.Contains(save, "cali-new-bad") {
		t.Errorf("a refused batch left chains behind:\n%s", save)
	}
	if err := w.write([]encodedChain{ok}, nil); err != nil {
		t.Fatalf("the batch after a refused one: %v", err)
	}
	if save := d.save("filter"); !strings.Contains(save, ":cali-new-ok") {
		t.Errorf("the batch after a refused one did not land:\n%s", save)
	}
}
