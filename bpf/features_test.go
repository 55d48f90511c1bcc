package bpf

import (
	"fmt"
	"testing"

	"os"

	"golang.org/x/sys/unix"
)

// TestHaveTCX: the probe says what the running kernel's version says
// (TCX came with Linux 6.6).
func TestHaveTCX(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (loading a program)")
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	want := major > 6 || (major == 6 && minor >= 6)
	got, err := HaveTCX()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("HaveTCX() = %v on Linux %d.%d, want %v", got, major, minor, want)
	}
}
