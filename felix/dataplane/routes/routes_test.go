package routes

import (
	"net/netip"
	"strings"
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

func TestManager(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "node")
	ns.MustRun(t, "ip", "link", "add", "cali1", "type", "veth", "peer", "name", "p1")
	ns.MustRun(t, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "p2")
	for _, l := range []string{"cali1", "p1", "eth1", "p2"} {
		ns.MustRun(t, "ip", "link", "set", l, "up")
	}
	// Routes that are not ours to remove: BGP's on a cali interface, and
	// a scope-link route on another interface.
	ns.MustRun(t, "ip", "route", "add", "10.70.0.0/26", "dev", "cali1", "proto", "201", "scope", "link")
	ns.MustRun(t, "ip", "route", "add", "10.71.0.1/32", "dev", "eth1", "scope", "link")
	// One nobody wants on a cali interface.
	ns.MustRun(t, "ip", "route", "add", "10.65.0.99/32", "dev", "cali1", "scope", "link")

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
	m.Set(netip.MustParsePrefix("10.65.0.1/32"), "cali1")
	m.Set(netip.MustParsePrefix("10.65.0.2/32"), "cali2") // interface not there yet
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	// -N: protocol numbers as numbers (a routing daemon may name them).
	routes := func() string { return ns.MustRun(t, "ip", "-N", "route", "show") }
	got := routes()
	for _, want := range []string{"10.65.0.1 dev cali1", "10.70.0.0/26 dev cali1 proto 201", "10.71.0.1 dev eth1"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "10.65.0.99") {
		t.Errorf("unwanted workload route kept:\n%s", got)
	}
	if m.Pending() != 1 {
		t.Errorf("Pending = %d, want 1 (cali2 missing)", m.Pending())
	}
	ns.MustRun(t, "ip", "link", "add", "cali2", "type", "veth", "peer", "name", "p3")
	ns.MustRun(t, "ip", "link", "set", "cali2", "up")
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if m.Pending() != 0 || !strings.Contains(routes(), "10.65.0.2 dev cali2") {
		t.Errorf("pending route not written once its interface came up:\n%s", routes())
	}
	m.Remove(netip.MustParsePrefix("10.65.0.1/32"))
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := routes(); strings.Contains(got, "10.65.0.1 ") || !strings.Contains(got, "proto 201") {
		t.Errorf("after removal:\n%s", got)
	}
}

// TestOptions: deviceRouteProtocol and deviceRouteSourceAddress(IPv6) are
// what felix writes (a change rewrites its routes in place, the old
// protocol's included); removeExternalRoutes true (the default) removes
// another program's scope-link route on a workload interface, false
// keeps it.
func TestOptions(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "node")
	ns.MustRun(t, "ip", "link", "add", "cali1", "type", "veth", "peer", "name", "p1")
	for _, l := range []string{"cali1", "p1", "lo"} {
		ns.MustRun(t, "ip", "link", "set", l, "up")
	}
	ns.MustRun(t, "ip", "addr", "add", "198.18.5.1/32", "dev", "lo")
	ns.MustRun(t, "ip", "-6", "addr", "add", "fd00:18::5/128", "dev", "lo")
	m, err := New(nstest.Runner(t, ns), log.WithField("test", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	routes := func() string {
		return ns.MustRun(t, "ip", "-N", "route", "show") + ns.MustRun(t, "ip", "-N", "-6", "route", "show")
	}
	apply := func() {
		t.Helper()
		if err := m.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, want, unwanted []string) {
		t.Helper()
		got := routes()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: routes lack %q:\n%s", what, w, got)
			}
		}
		for _, u := range unwanted {
			if strings.Contains(got, u) {
				t.Errorf("%s: routes hold %q:\n%s", what, u, got)
			}
		}
	}
	m.Set(netip.MustParsePrefix("10.65.0.1/32"), "cali1")
	m.Set(netip.MustParsePrefix("fd00:65::1/128"), "cali1")
	apply()
	// ip -N prints scope link as 253 and leaves out proto 3 (boot).
	check("defaults", []string{"10.65.0.1 dev cali1 scope 253", "fd00:65::1 dev cali1 metric"}, []string{"src", "proto 90"})

	m.SetOptions(Options{Protocol: 90, Src4: netip.MustParseAddr("198.18.5.1"), Src6: netip.MustParseAddr("fd00:18::5")})
	apply()
	check("protocol 90 with sources", []string{"10.65.0.1 dev cali1 proto 90 scope 253 src 198.18.5.1", "fd00:65::1 dev cali1 proto 90 src fd00:18::5"}, []string{"10.65.0.1 dev cali1 scope"})

	// Another program's routes on the workload interface.
	ns.MustRun(t, "ip", "route", "add", "10.65.0.50/32", "dev", "cali1", "proto", "99", "scope", "link")
	m.SetOptions(Options{Protocol: 90, KeepExternal: true})
	apply()
	check("removeExternalRoutes false", []string{"10.65.0.50 dev cali1 proto 99", "10.65.0.1 dev cali1 proto 90 scope 253"}, []string{"src 198.18.5.1"})
	m.SetOptions(Options{})
	apply()
	check("removeExternalRoutes true", []string{"10.65.0.1 dev cali1 scope 253", "fd00:65::1 dev cali1 metric"}, []string{"10.65.0.50", "proto 90"})
}
