package nsexec_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// waiting lists the PIDs of processes whose command line holds marker.
func waiting(t *testing.T, marker string) []int {
	t.Helper()
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), marker) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

// oneWaiting waits for exactly one process with marker and returns it.
func oneWaiting(t *testing.T, marker string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if p := waiting(t, marker); len(p) == 1 {
			return p[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("want one warm process %s, have %v", marker, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunWarm(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "warm")
	r, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantNS, err := os.Readlink(ns.Path())
	if err != nil {
		// /run/netns/x is a bind mount, not a link: compare inodes instead.
		var st syscall.Stat_t
		if err := syscall.Stat(ns.Path(), &st); err != nil {
			t.Fatal(err)
		}
		wantNS = "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	}
	marker := "warm-test-" + strconv.Itoa(os.Getpid())
	// Echoes its input, then its PID and its network namespace. The shell
	// reads the input itself: killing it closes the pipe.
	script := `read -r line; echo "$line $$ $(readlink /proc/self/ns/net)"`
	run := func(in string) (pid int, netns string) {
		t.Helper()
		out, err := r.RunWarm(context.Background(), in, "sh", "-c", script, marker)
		if err != nil {
			t.Fatal(err)
		}
		r.WarmUp() // the batch of work is done: start the next one
		f := strings.Fields(string(out))
		if len(f) != 3 || f[0] != in {
			t.Fatalf("output %q, want the input %q, a PID and a namespace", out, in)
		}
		pid, _ = strconv.Atoi(f[1])
		return pid, f[2]
	}

	// The first call has no warm process: it starts one itself.
	if _, got := run("first"); got != wantNS {
		t.Errorf("ran in namespace %s, want %s", got, wantNS)
	}
	// The next one was started in the background and waits for input.
	for !r.HasWarm("sh", "-c", script, marker) {
		time.Sleep(2 * time.Millisecond)
	}
	ready := oneWaiting(t, marker)
	pid, got := run("second")
	if pid != ready {
		t.Errorf("second call ran in PID %d, not in the warm process %d", pid, ready)
	}
	if got != wantNS {
		t.Errorf("warm process ran in namespace %s, want %s", got, wantNS)
	}

	// A warm process killed while idle is replaced by a fresh one.
	ready = oneWaiting(t, marker)
	if err := syscall.Kill(ready, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for len(waiting(t, marker)) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if pid, _ := run("third"); pid == ready {
		t.Errorf("ran in the killed process %d", pid)
	}

	// A failing command reports its standard error.
	_, err = r.RunWarm(context.Background(), "x", "sh", "-c", `read -r line; echo broken >&2; exit 3`, marker)
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("failing command: err = %v, want its stderr", err)
	}
	r.WarmUp()

	// Close leaves no process behind (one warm process waits per
	// command line: two here).
	for deadline := time.Now().Add(5 * time.Second); len(waiting(t, marker)) != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("want two warm processes, have %v", waiting(t, marker))
		}
	}
	r.Close()
	if p := waiting(t, marker); len(p) != 0 {
		t.Errorf("processes left after Close: %v", p)
	}
}

func TestRunWarmPrimer(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "primer")
	r, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := t.TempDir()
	marker := "primer-test-" + strconv.Itoa(os.Getpid())
	// The first line is a primer (recorded in a file, or a failure) or,
	// with no primer, already the input.
	script := `read -r first
case "$first" in
primer-ok) echo primed >` + dir + `/$$; read -r line ;;
primer-bad) exit 1 ;;
*) line=$first ;;
esac
echo "$line"`
	args := []string{"-c", script, marker}

	r.Prime("primer-ok\n", "sh", args...)
	if _, err := r.RunWarm(context.Background(), "one\n", "sh", args...); err != nil {
		t.Fatal(err)
	}
	r.WarmUp()
	// The warm process started for the next call has run its primer
	// before being given any input.
	for !r.HasWarm("sh", args...) {
		time.Sleep(2 * time.Millisecond)
	}
	ready := oneWaiting(t, marker)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(ready))); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm process did not run its primer while waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
	out, err := r.RunWarm(context.Background(), "two\n", "sh", args...)
	if err != nil || strings.TrimSpace(string(out)) != "two" {
		t.Fatalf("primed process: %q, %v; want two", out, err)
	}
	r.WarmUp()

	// A primer that fails does not fail the input: it runs again in a
	// fresh process without primer.
	for !r.HasWarm("sh", args...) { // started (and primed) with the good primer
		time.Sleep(2 * time.Millisecond)
	}
	r.Prime("primer-bad\n", "sh", args...)
	if _, err := r.RunWarm(context.Background(), "three\n", "sh", args...); err != nil {
		t.Fatal(err)
	}
	r.WarmUp()
	for len(waiting(t, marker)) > 0 { // the one with the bad primer exits
		time.Sleep(5 * time.Millisecond)
	}
	out, err = r.RunWarm(context.Background(), "four\n", "sh", args...)
	if err != nil || strings.TrimSpace(string(out)) != "four" {
		t.Fatalf("after a failed primer: %q, %v; want four", out, err)
	}
}
