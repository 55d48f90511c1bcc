package bpf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

func readSwitch(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeSwitch(t *testing.T, file, v string) {
	t.Helper()
	if err := writeFile(file, v); err != nil {
		t.Fatal(err)
	}
}

// The scope turns a switch at 0 on for the attachments under way,
// counted, and off after the last; it leaves a switch at 1 (the
// operator's) alone, as it does when bpfExpediteAttach is off; it turns
// off, once, a switch an earlier felix left on with its mark.
func TestRCUScope(t *testing.T) {
	newScope := func(content string) (*rcuScope, string, string, *test.Hook) {
		dir := t.TempDir()
		file, mark := filepath.Join(dir, "rcu_expedited"), filepath.Join(dir, "run", "mark")
		writeSwitch(t, file, content)
		logger, hook := test.NewNullLogger()
		logger.SetLevel(log.InfoLevel)
		return newRCUScope(file, mark, log.NewEntry(logger)), file, mark, hook
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	s, file, mark, _ := newScope("0\n")
	s.enter()
	if got := readSwitch(t, file); got != "1" || !exists(mark) {
		t.Errorf("one attachment under way: switch %q, mark %v; want 1 and the mark", got, exists(mark))
	}
	s.enter()
	s.exit()
	if got := readSwitch(t, file); got != "1" {
		t.Errorf("one of two attachments ended: switch %q, want 1", got)
	}
	s.exit()
	if got := readSwitch(t, file); got != "0" || exists(mark) {
		t.Errorf("all ended: switch %q, mark %v; want 0 and no mark", got, exists(mark))
	}

	s, file, mark, hook := newScope("1\n")
	for range 2 {
		s.enter()
		s.exit()
	}
	if got := readSwitch(t, file); got != "1" || exists(mark) {
		t.Errorf("operator's switch: %q, mark %v; want 1 left alone, no mark", got, exists(mark))
	}
	if n := len(hook.AllEntries()); n != 1 {
		t.Errorf("operator's switch logged %d times, want once", n)
	}

	s, file, _, _ = newScope("0\n")
	s.setEnabled(false)
	s.enter()
	if got := readSwitch(t, file); got != "0" {
		t.Errorf("bpfExpediteAttach false: switch %q within an attachment, want 0", got)
	}
	s.exit()

	// An earlier felix killed within an attachment: mark and switch on,
	// turned off at start.
	s, file, mark, _ = newScope("1\n")
	writeSwitch(t, mark, "1")
	s.setEnabled(true)
	if got := readSwitch(t, file); got != "0" || exists(mark) {
		t.Errorf("felix started after one killed: switch %q, mark %v; want 0, no mark", got, exists(mark))
	}
	s.enter()
	if got := readSwitch(t, file); got != "1" || !exists(mark) {
		t.Errorf("after a killed felix: switch %q, mark %v; want ours now (1, mark)", got, exists(mark))
	}
	s.exit()
	if got := readSwitch(t, file); got != "0" || exists(mark) {
		t.Errorf("after a killed felix, all ended: switch %q, mark %v; want 0, no mark", got, exists(mark))
	}

	// A switch felix cannot write: left alone, logged once.
	s, _, mark, hook = newScope("0\n")
	s.file = filepath.Join(mark, "not-a-dir-yet", "x") // unreadable
	for range 2 {
		s.enter()
		s.exit()
	}
	if n := len(hook.AllEntries()); n != 1 || exists(mark) {
		t.Errorf("unreadable switch: logged %d times, mark %v; want once, no mark", n, exists(mark))
	}
}

// TestExpediteAttachKernel attaches new interfaces' TCX hooks on this
// kernel, alternately with bpfExpediteAttach on and off: on, the switch
// (/sys/kernel/rcu_expedited) is back at 0 after each attachment and the
// attachments are at least twice as fast (about 15× here) (one expedited grace period per
// hook instead of a plain one); with the switch at 1 (an operator's) it
// stays 1. The switch is the kernel's, node-wide: it is put back as it
// was on every exit path.
func TestExpediteAttachKernel(t *testing.T) {
	nstest.RequireRoot(t)
	was, err := os.ReadFile(rcuExpedited)
	if err != nil {
		t.Skipf("no %s: %v", rcuExpedited, err)
	}
	if strings.TrimSpace(string(was)) != "0" {
		t.Skipf("%s is %q (expedited by someone else): the scope would leave it alone", rcuExpedited, strings.TrimSpace(string(was)))
	}
	t.Cleanup(func() {
		if err := os.WriteFile(rcuExpedited, was, 0); err != nil {
			t.Errorf("%s not given back: %v", rcuExpedited, err)
		}
	})
	mark := filepath.Join(t.TempDir(), "mark")
	td := newTestDriverWith(t, Config{RCUMark: mark})
	scope := td.d.rcu
	// The node port tunnel's device is attached in the background: its
	// attachment would hold the switch on across the ones measured.
	applySettled(t, td.d)
	if got := readSwitch(t, rcuExpedited); got != "0" {
		t.Fatalf("after the driver's first attachments: %s is %q, want 0", rcuExpedited, got)
	}

	// veth makes a veth pair on the node, both ends up.
	veth := func(name string) netlink.Link {
		t.Helper()
		if err := td.nodeH.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{name + "p", name} {
			l, err := td.nodeH.LinkByName(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := td.nodeH.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			if n == name {
				return l
			}
		}
		return nil
	}
	n := 0
	attach := func(expedite bool) time.Duration {
		t.Helper()
		n++
		link := veth(fmt.Sprintf("rcutst%d", n)) // not a workload prefix: the watcher leaves it
		iface := link.Attrs().Name
		scope.setEnabled(expedite)
		t0 := time.Now()
		if err := td.d.att.ensure(link.Attrs().Index, palbpf.KindWorkload, false); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if !td.d.att.has(link.Attrs().Index, palbpf.KindWorkload) {
			t.Fatalf("%s: not attached", iface)
		}
		if got := readSwitch(t, rcuExpedited); got != "0" {
			t.Fatalf("after an attachment (expedite %v): %s is %q, want 0", expedite, rcuExpedited, got)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("felix's mark left after the attachment")
		}
		return took
	}
	var on, off []time.Duration
	for range 8 {
		on = append(on, attach(true))
		off = append(off, attach(false))
	}
	slices.Sort(on)
	slices.Sort(off)
	t.Logf("TCX attachment of a new interface's hooks, median: expedited %v, plain %v", on[len(on)/2], off[len(off)/2])
	if on[len(on)/2]*2 > off[len(off)/2] {
		t.Errorf("expedited attachments took %v at the median, plain ones %v: want at least twice as fast", on[len(on)/2], off[len(off)/2])
	}

	// An operator's 1 stays.
	writeSwitch(t, rcuExpedited, "1")
	link := veth("rcutstop")
	scope.setEnabled(true)
	if err := td.d.att.ensure(link.Attrs().Index, palbpf.KindWorkload, false); err != nil {
		t.Fatal(err)
	}
	if got := readSwitch(t, rcuExpedited); got != "1" {
		t.Errorf("operator's switch after an attachment: %q, want 1", got)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("felix wrote its mark over an operator's switch")
	}
}
