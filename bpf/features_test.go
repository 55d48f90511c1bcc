package bpf

import (
	"fmt"
	"testing"

	"os"

	"golang.org/x/sys/unix"
)

// kernelVersion is the running kernel's major and minor version.
func kernelVersion(t *testing.T) (major, minor int) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	return major, minor
}

// TestHaveTCX and TestHaveLoop: each probe says what the running
// kernel's version says (TCX came with Linux 6.6, bpf_loop with 5.17).
func TestHaveTCX(t *testing.T) { testProbe(t, "HaveTCX", HaveTCX, 6, 6) }

func TestHaveLoop(t *testing.T) { testProbe(t, "HaveLoop", HaveLoop, 5, 17) }

func testProbe(t *testing.T, name string, probe func() (bool, error), wantMajor, wantMinor int) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (loading a program)")
	}
	major, minor := kernelVersion(t)
	want := major > wantMajor || (major == wantMajor && minor >= wantMinor)
	got, err := probe()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s() = %v on Linux %d.%d, want %v", name, got, major, minor, want)
	}
}
