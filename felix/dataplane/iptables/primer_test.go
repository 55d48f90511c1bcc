package iptables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// warmRestores lists the iptables-nft-restore processes waiting in the
// network namespace of path.
func warmRestores(t *testing.T, path string) []string {
	t.Helper()
	want, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmdline), "iptables-nft-restore\x00--noflush") {
			continue
		}
		if st, err := os.Stat(d + "/ns/net"); err == nil && os.SameFile(st, want) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

// TestPrimer checks that the primer given to a waiting iptables-nft-restore
// is accepted (the process is still there, waiting, once it has run) and
// leaves nothing in the raw table.
func TestPrimer(t *testing.T) {
	d := newDriver(t, NFT)
	d.set(input("cali1"), Insert)
	deadline := time.Now().Add(5 * time.Second)
	for len(warmRestores(t, d.ns.Path())) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("want one iptables-nft-restore waiting after an update, have %v", warmRestores(t, d.ns.Path()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Long enough for the primer's transaction to have failed if it were
	// going to: the process must still be waiting.
	time.Sleep(200 * time.Millisecond)
	if p := warmRestores(t, d.ns.Path()); len(p) != 1 {
		t.Fatalf("the primed iptables-nft-restore exited (primer rejected?): %v", p)
	}
	if raw := d.save("raw"); strings.Contains(raw, "cali-primer") {
		t.Errorf("the primer left its chain in raw:\n%s", raw)
	}
	// And the next update, through the primed process, still lands.
	if n := d.set(input("cali1", "cali2"), Insert); n == 0 {
		t.Error("second update wrote nothing")
	}
	if !strings.Contains(d.save("filter"), "cali-tw-cali2") {
		t.Error("the update through the primed process is not in the kernel")
	}
}
