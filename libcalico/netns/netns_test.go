package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// threadNS is the network namespace of the calling thread, as the kernel
// names it ("net:[inode]").
func threadNS(t *testing.T) string {
	l, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "plnetns-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	runtime.LockOSThread()
	home := threadNS(t)
	runtime.UnlockOSThread()

	var inside string
	want := errors.New("fn's error")
	err := Do(Path(name), func() error {
		inside = threadNS(t)
		return want
	})
	if !errors.Is(err, want) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if inside == home || inside == "" {
		t.Errorf("fn ran in %q, the caller's namespace %q", inside, home)
	}
	// The threads Do used went back: many goroutines after many calls
	// all find the caller's namespace.
	for range 20 {
		_ = Do(Path(name), func() error { return nil })
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if ns := threadNS(t); ns != home {
				mu.Lock()
				wrong = append(wrong, ns)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("threads left in another namespace after Do: %v", wrong)
	}

	missing := Path(name + "-missing")
	if err := Do(missing, func() error { t.Error("fn ran without a namespace"); return nil }); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Do on a missing namespace: %v, want an error naming %s", err, missing)
	}
}
