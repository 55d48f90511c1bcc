package iptables

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestLegacyWaitsForXtablesLock holds the xtables lock (as another
// iptables user, kube-proxy say, would) while the legacy backend writes:
// the write waits for it instead of failing. (iptables-legacy-restore 1.8.9
// blocks on the lock by itself; felix's --wait 10 only bounds the wait, so
// a felix stuck behind a lock that is never released gives up and retries.)
func TestLegacyWaitsForXtablesLock(t *testing.T) {
	d := newDriver(t, Legacy)
	f, err := os.OpenFile("/run/xtables.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	const held = 500 * time.Millisecond
	go func() {
		time.Sleep(held)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}()
	start := time.Now()
	if n := d.set(input("cali1"), Insert); n == 0 {
		t.Fatal("nothing written")
	}
	if took := time.Since(start); took < held-50*time.Millisecond {
		t.Errorf("the write took %s while the lock was held for %s: it did not wait for it", took, held)
	}
}
