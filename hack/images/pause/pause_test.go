package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// build compiles pause as `make images` does (static, CGO off).
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// exited waits for cmd to end and returns how, or fails after 5 s.
func exited(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause did not exit within 5 s of the signal")
		return nil
	}
}

// TestSignals: pause runs until SIGINT or SIGTERM and then exits 0, as
// the kubelet's StopPodSandbox expects of the sandbox.
func TestSignals(t *testing.T) {
	bin := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			if cmd.ProcessState != nil {
				t.Fatal("pause exited by itself")
			}
			if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("pause is not running after SIGCHLD: %v", err)
			}
			if err := exited(t, cmd); err != nil {
				t.Errorf("exit after %v: %v, want status 0", sig, err)
			}
		})
	}
}

// TestReapsOrphans: as init of a PID namespace (a pod sharing its PID
// namespace), pause reaps the orphans handed to it: a process started in
// the namespace whose parent dies is reparented to pause and, once it
// exits, leaves no zombie.
func TestReapsOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace")
	}
	bin := build(t)
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	// nsenter's child (PID namespace of pause) starts 20 sleepers in the
	// background and exits at once: they are orphans, reparented to pause.
	// (Their output goes elsewhere, or nsenter's pipe would stay open
	// until they end.)
	script := "for i in $(seq 20); do sleep 0.5 >/dev/null 2>&1 & done; exit 0"
	if out, err := exec.Command("nsenter", "-t", pid, "-p", "--", "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	if n := len(children(t, pid, "")); n != 20 {
		t.Fatalf("pause has %d children right after, want the 20 orphans", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		live, zombies := children(t, pid, ""), children(t, pid, "Z")
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s on, pause still has %d children, %d of them zombies", len(live), len(zombies))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := exited(t, cmd); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// children lists the processes whose parent is ppid (in state state, or
// any state when empty), from /proc.
func children(t *testing.T, ppid, state string) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == ppid && (state == "" || f[0] == state) {
			out = append(out, p)
		}
	}
	return out
}
