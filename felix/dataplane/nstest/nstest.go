// Package nstest gives felix's kernel tests their network namespaces: each
// test gets a unique prefix (plfx-<random>-), every namespace it makes is
// deleted when the test ends, pass or fail, and commands run inside them.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// RequireRoot skips the test when not run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kernel test: needs root (network namespaces, iptables)")
	}
}

// Prefix is a unique namespace prefix for one test.
func Prefix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "plfx-" + hex.EncodeToString(b) + "-"
}

// NS is one network namespace of a test.
type NS struct {
	Name string
}

// Path is the namespace's file.
func (n NS) Path() string { return "/run/netns/" + n.Name }

// New makes a namespace named prefix+name with loopback up, deleted when
// the test ends.
func New(t testing.TB, prefix, name string) NS {
	t.Helper()
	ns := NS{Name: prefix + name}
	if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.Name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Cmd is a command run in the namespace.
func (n NS) Cmd(args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Run runs a command in the namespace and returns its combined output.
func (n NS) Run(args ...string) (string, error) {
	out, err := n.Cmd(args...).CombinedOutput()
	return string(out), err
}

// MustRun runs a command in the namespace and fails the test on error.
func (n NS) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		t.Fatalf("in %s: %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Runner runs commands and code in the namespace until the test ends.
func Runner(t testing.TB, n NS) *nsexec.Runner {
	t.Helper()
	r, err := nsexec.New(n.Path())
	if err != nil {
		t.Fatalf("namespace %s: %v", n.Name, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}
