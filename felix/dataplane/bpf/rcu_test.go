package bpf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// TestExpediteAttachKernel: the driver's real TCX attachments go through
// the scope: each fresh attachment turns the switch on and back off, the
// mark goes with it, none with bpfExpediteAttach off, and an operator's 1
// stays. The switch is a file of the test's own: the kernel's is
// node-wide and every felix running beside this test (make test runs the
// lab's and felix's suites at the same time) turns it on and off. What
// expediting buys is measured by BenchmarkNewPodFirstResponse on the
// kernel's own switch.
func TestExpediteAttachKernel(t *testing.T) {
	nstest.RequireRoot(t)
	dir := t.TempDir()
	sw, mark := filepath.Join(dir, "rcu_expedited"), filepath.Join(dir, "mark")
	writeSwitch(t, sw, "0")
	td := newTestDriverWith(t, Config{RCUMark: mark, RCUSwitch: sw})
	scope := td.d.rcu
	// The node port tunnel's device is attached in the background: wait
	// for it so the counts below are the attachments made here.
	applySettled(t, td.d)
	if got := readSwitch(t, sw); got != "0" {
		t.Fatalf("after the driver's first attachments: the switch is %q, want 0", got)
	}
	turnedOn := func() int {
		scope.mu.Lock()
		defer scope.mu.Unlock()
		return scope.turnedOn
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
	attach := func(expedite bool) {
		t.Helper()
		n++
		link := veth(fmt.Sprintf("rcutst%d", n)) // not a workload prefix: the watcher leaves it
		iface := link.Attrs().Name
		scope.setEnabled(expedite)
		before := turnedOn()
		if err := td.d.att.ensure(link.Attrs().Index, palbpf.KindWorkload, false); err != nil {
			t.Fatal(err)
		}
		if !td.d.att.has(link.Attrs().Index, palbpf.KindWorkload) {
			t.Fatalf("%s: not attached", iface)
		}
		want := before
		if expedite {
			want++
		}
		if got := turnedOn(); got != want {
			t.Fatalf("%s (expedite %v): the switch was turned on %d times, want %d", iface, expedite, got-before, want-before)
		}
		if got := readSwitch(t, sw); got != "0" {
			t.Fatalf("after an attachment (expedite %v): the switch is %q, want 0", expedite, got)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("felix's mark left after the attachment")
		}
	}
	for range 4 {
		attach(true)
		attach(false)
	}

	// An operator's 1 stays.
	writeSwitch(t, sw, "1")
	before := turnedOn()
	link := veth("rcutstop")
	scope.setEnabled(true)
	if err := td.d.att.ensure(link.Attrs().Index, palbpf.KindWorkload, false); err != nil {
		t.Fatal(err)
	}
	if got := readSwitch(t, sw); got != "1" {
		t.Errorf("operator's switch after an attachment: %q, want 1", got)
	}
	if turnedOn() != before {
		t.Error("felix turned on a switch the operator keeps on")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("felix wrote its mark over an operator's switch")
	}
}
