package ipsets

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// members lists a kernel set's members, sorted ("" when the set is absent).
func members(t *testing.T, ns nstest.NS, name string) []string {
	t.Helper()
	out, err := ns.Run("ipset", "save", name)
	if err != nil {
		if strings.Contains(out, "does not exist") {
			return nil
		}
		t.Fatalf("ipset save %s: %v: %s", name, err, out)
	}
	got := []string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "add" {
			got = append(got, f[2])
		}
	}
	slices.Sort(got)
	return got
}

func TestManager(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "node")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	ctx := context.Background()
	v4, v6 := New(4, run, log.WithField("test", t.Name())), New(6, run, log.WithField("test", t.Name()))
	apply := func() {
		t.Helper()
		for _, m := range []*Manager{v4, v6} {
			if err := m.ApplyUpdates(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.ApplyDeletions(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(name string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if got := members(t, ns, name); !slices.Equal(got, want) {
			t.Errorf("set %s = %v, want %v", name, got, want)
		}
	}
	// A set left by an earlier run, and someone else's set.
	ns.MustRun(t, "ipset", "create", "cali40s:leftover", "hash:net")
	ns.MustRun(t, "ipset", "create", "other", "hash:net")

	for _, m := range []*Manager{v4, v6} {
		m.Set("s:web", calc.IPSetNet, []string{"10.65.0.1", "10.65.1.0/24", "fd00::1"})
		m.Set("n:http", calc.IPSetIPPort, []string{"10.65.0.1,tcp:80", "fd00::1,tcp:80"})
	}
	apply()
	check("cali40s:web", "10.65.0.1", "10.65.1.0/24")
	check("cali60s:web", "fd00::1")
	check("cali40n:http", "10.65.0.1,tcp:80")
	if members(t, ns, "cali40s:leftover") != nil {
		t.Error("a cali40 set nobody wants survived")
	}
	if members(t, ns, "other") == nil {
		t.Error("another program's set was destroyed")
	}

	t.Run("delta", func(t *testing.T) {
		v4.Delta("s:web", []string{"10.65.0.2", "10.65.2.0/25"}, []string{"10.65.1.0/24"})
		v4.Delta("n:http", []string{"10.65.0.2,udp:53", "10.65.0.3,sctp:9000"}, nil)
		v6.Delta("s:web", []string{"fd00::2", "fd00:1::/64"}, []string{"fd00::1"})
		v4.Set("n:new", calc.IPSetIPPort, []string{"10.65.0.7,sctp:9000", "fd00::7,sctp:9000"})
		v6.Set("n:new", calc.IPSetIPPort, []string{"10.65.0.7,sctp:9000", "fd00::7,sctp:9000"})
		// Small deltas and small new sets go through netlink: no process.
		if !v4.applyNetlink() || !v6.applyNetlink() {
			t.Fatal("a small delta was not written through netlink")
		}
		check("cali40s:web", "10.65.0.1", "10.65.0.2", "10.65.2.0/25")
		check("cali40n:http", "10.65.0.1,tcp:80", "10.65.0.2,udp:53", "10.65.0.3,sctp:9000")
		check("cali60s:web", "fd00::2", "fd00:1::/64")
		check("cali40n:new", "10.65.0.7,sctp:9000")
		check("cali60n:new", "fd00::7,sctp:9000")
		if out := ns.MustRun(t, "ipset", "list", "cali60n:new"); !strings.Contains(out, "family inet6") || !strings.Contains(out, "maxelem 1048576") {
			t.Errorf("set created through netlink lacks its family or size:\n%s", out)
		}
		// The kernel read back agrees with what was written.
		v4.Resync()
		v6.Resync()
		apply()
		check("cali40n:new", "10.65.0.7,sctp:9000")
		v4.Delta("n:http", nil, []string{"10.65.0.2,udp:53", "10.65.0.3,sctp:9000"})
		apply()
		check("cali40n:http", "10.65.0.1,tcp:80")
	})
	t.Run("big change swaps", func(t *testing.T) {
		var big []string
		for i := range 300 {
			big = append(big, fmt.Sprintf("10.66.%d.%d", i/250, i%250+1))
		}
		v4.Set("s:web", calc.IPSetNet, big)
		apply()
		check("cali40s:web", big...)
		if out := ns.MustRun(t, "ipset", "list", "-name"); strings.Contains(out, "cali4t") {
			t.Errorf("temporary set left behind: %s", out)
		}
	})
	t.Run("tamper repaired at resync", func(t *testing.T) {
		ns.MustRun(t, "ipset", "del", "cali40n:http", "10.65.0.1,tcp:80")
		ns.MustRun(t, "ipset", "add", "cali40n:http", "10.65.9.9,tcp:81")
		v4.Resync()
		apply()
		check("cali40n:http", "10.65.0.1,tcp:80")
	})
	t.Run("removed", func(t *testing.T) {
		for _, m := range []*Manager{v4, v6} {
			m.Remove("n:http")
		}
		apply()
		if members(t, ns, "cali40n:http") != nil || members(t, ns, "cali60n:http") != nil {
			t.Error("removed sets still in the kernel")
		}
	})
}

// TestMaxSize: maxIpsetSize is the maxelem sets are created with (new
// ones through netlink and restore alike); a change rebuilds the existing
// sets at the new size with their members, a restarted manager rebuilds
// sets of another size, and a set that would hold more than the maximum
// fails to write.
func TestMaxSize(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "node")
	run := nstest.Runner(t, ns)
	ctx := context.Background()
	maxelem := func(name string) string {
		t.Helper()
		out := ns.MustRun(t, "ipset", "list", "-t", name)
		for _, l := range strings.Split(out, "\n") {
			if _, h, ok := strings.Cut(l, "Header: "); ok {
				f := strings.Fields(h)
				if i := slices.Index(f, "maxelem"); i >= 0 {
					return f[i+1]
				}
			}
		}
		t.Fatalf("no maxelem in\n%s", out)
		return ""
	}
	m := New(4, run, log.WithField("test", t.Name()))
	m.SetMaxSize(1000)
	m.Set("s:small", calc.IPSetNet, []string{"10.0.0.1"})
	var big []string
	for i := range 100 {
		big = append(big, fmt.Sprintf("10.1.%d.1", i))
	}
	m.Set("s:big", calc.IPSetNet, big) // more than netlink writes: ipset restore
	if err := m.ApplyUpdates(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"cali40s:small", "cali40s:big"} {
		if got := maxelem(n); got != "1000" {
			t.Errorf("%s maxelem %s, want 1000", n, got)
		}
	}
	m.SetMaxSize(5000)
	if err := m.ApplyUpdates(ctx); err != nil {
		t.Fatal(err)
	}
	if got := maxelem("cali40s:big"); got != "5000" || len(members(t, ns, "cali40s:big")) != 100 {
		t.Errorf("after the change: maxelem %s, %d members; want 5000, 100", got, len(members(t, ns, "cali40s:big")))
	}
	// A restarted felix with the default size rebuilds them.
	m2 := New(4, run, log.WithField("test", t.Name()))
	m2.Set("s:small", calc.IPSetNet, []string{"10.0.0.1"})
	if err := m2.ApplyUpdates(ctx); err != nil {
		t.Fatal(err)
	}
	if got := maxelem("cali40s:small"); got != fmt.Sprint(MaxElem) {
		t.Errorf("restarted: maxelem %s, want %d", got, MaxElem)
	}
	m2.SetMaxSize(50)
	m2.Set("s:big", calc.IPSetNet, big)
	if err := m2.ApplyUpdates(ctx); err == nil {
		t.Error("100 members written into sets of at most 50")
	}
}
