package routes

import (
	"strings"
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// TestWireguardTables: the route tables routeTableRanges gives WireGuard
// are kept as Calico's felix keeps them with WireGuard off: what a node
// that ran Calico with WireGuard left there (routes in the tables, the
// rule of priority 99 sending unmarked packets to them) is removed at the
// first apply and whenever it comes back; other tables, rules of another
// priority and rules to other tables stay. Moving the ranges moves the
// tables kept empty.
func TestWireguardTables(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "node")
	ns.MustRun(t, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "p1")
	ns.MustRun(t, "ip", "link", "set", "eth1", "up")
	ns.MustRun(t, "ip", "link", "set", "p1", "up")
	ns.MustRun(t, "ip", "addr", "add", "198.18.7.1/24", "dev", "eth1")
	ns.MustRun(t, "ip", "-6", "addr", "add", "fd00:7::1/64", "dev", "eth1", "nodad")
	leftover := func() {
		// What Calico's felix writes with WireGuard on: table 1 (IPv4) and
		// 2 (IPv6), reached by a rule of priority 99 for unmarked packets.
		ns.MustRun(t, "ip", "route", "add", "10.90.1.0/26", "via", "198.18.7.2", "table", "1")
		ns.MustRun(t, "ip", "-6", "route", "add", "fd90:1::/122", "via", "fd00:7::2", "table", "2")
		ns.MustRun(t, "ip", "rule", "add", "not", "fwmark", "0x100000/0x100000", "lookup", "1", "priority", "99")
		ns.MustRun(t, "ip", "-6", "rule", "add", "not", "fwmark", "0x100000/0x100000", "lookup", "2", "priority", "99")
	}
	leftover()
	// Not WireGuard's: another table, a rule of another priority to
	// table 1, and a rule of priority 99 to another table.
	ns.MustRun(t, "ip", "route", "add", "10.91.0.0/24", "via", "198.18.7.3", "table", "7")
	ns.MustRun(t, "ip", "rule", "add", "from", "10.99.0.0/16", "lookup", "1", "priority", "150")
	ns.MustRun(t, "ip", "rule", "add", "from", "10.98.0.0/16", "lookup", "7", "priority", "99")

	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	m, err := New(run, log.WithField("test", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	apply := func(o Options) {
		t.Helper()
		m.SetOptions(o)
		m.Resync()
		if err := m.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	table := func(v, n string) string { return ns.MustRun(t, "ip", v, "route", "show", "table", n) }
	rules := func(v string) string { return ns.MustRun(t, "ip", v, "rule", "show") }
	// Calico's defaults: ranges 1-250, rule priority 99.
	def := Options{WireguardTable4: 1, WireguardTable6: 2, WireguardRulePriority: 99}
	apply(def)
	check := func(what string) {
		t.Helper()
		if got := table("-4", "1"); strings.Contains(got, "10.90.1.0") {
			t.Errorf("%s: WireGuard's IPv4 table keeps %s", what, got)
		}
		if got := table("-6", "2"); strings.Contains(got, "fd90:1::") {
			t.Errorf("%s: WireGuard's IPv6 table keeps %s", what, got)
		}
		if got := rules("-4"); strings.Contains(got, "99:\tnot from all fwmark 0x100000/0x100000 lookup 1") {
			t.Errorf("%s: IPv4 WireGuard rule kept:\n%s", what, got)
		}
		if got := rules("-6"); strings.Contains(got, "lookup 2") {
			t.Errorf("%s: IPv6 WireGuard rule kept:\n%s", what, got)
		}
		if got := table("-4", "7"); !strings.Contains(got, "10.91.0.0/24") {
			t.Errorf("%s: table 7 was emptied: %q", what, got)
		}
		got := rules("-4")
		for _, want := range []string{"150:\tfrom 10.99.0.0/16 lookup 1", "99:\tfrom 10.98.0.0/16 lookup 7"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: rule %q removed:\n%s", what, want, got)
			}
		}
	}
	check("first apply")
	// Put back by someone: gone at the next resync.
	leftover()
	apply(def)
	check("after a resync")

	// routeTableRanges [7-9]: table 7 is WireGuard's now and emptied with
	// its rule; table 1 is not any more.
	ns.MustRun(t, "ip", "route", "add", "10.92.0.0/24", "via", "198.18.7.3", "table", "1")
	apply(Options{WireguardTable4: 7, WireguardTable6: 8, WireguardRulePriority: 99})
	if got := table("-4", "7"); strings.Contains(got, "10.91.0.0") {
		t.Errorf("ranges 7-9: table 7 keeps %s", got)
	}
	if got := rules("-4"); strings.Contains(got, "lookup 7") {
		t.Errorf("ranges 7-9: the rule to table 7 kept:\n%s", got)
	}
	if got := table("-4", "1"); !strings.Contains(got, "10.92.0.0/24") {
		t.Errorf("ranges 7-9: table 1 emptied: %q", got)
	}
}
