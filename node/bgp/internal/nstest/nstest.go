// Package nstest makes network namespaces for the BGP tests: each test gets
// its own uniquely prefixed namespaces, deleted when it ends, pass or fail.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/netns"
)

// Lab is a set of namespaces sharing one prefix.
type Lab struct {
	t      testing.TB
	Prefix string
}

// New returns a lab whose namespaces are named "plbgp-<rand>-<name>". The
// test is skipped when not run as root.
func New(t testing.TB) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return &Lab{t: t, Prefix: "plbgp-" + hex.EncodeToString(b[:]) + "-"}
}

// NS creates a namespace (loopback up) and returns its full name.
func (l *Lab) NS(name string) string {
	l.t.Helper()
	full := l.Prefix + name
	l.Run("ip", "netns", "add", full)
	l.t.Cleanup(func() {
		// Kill what still runs inside, then remove it.
		if out, err := exec.Command("ip", "netns", "pids", full).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				if pid == strconv.Itoa(os.Getpid()) {
					continue
				}
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
		_ = exec.Command("ip", "netns", "del", full).Run()
	})
	l.Run("ip", "-n", full, "link", "set", "lo", "up")
	return full
}

// Run runs a command and fails the test on error.
func (l *Lab) Run(args ...string) string {
	l.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Bridge creates a namespace holding bridge br0 that nodes attach to.
func (l *Lab) Bridge(name string) string {
	l.t.Helper()
	ns := l.NS(name)
	l.Run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
	l.Run("ip", "-n", ns, "link", "set", "br0", "up")
	return ns
}

// Attach links ns to the bridge namespace with a veth: eth0 in ns holding
// addrs (CIDRs), the other end enslaved to br0.
func (l *Lab) Attach(bridgeNS, ns string, addrs ...string) {
	l.t.Helper()
	peer := "v" + strings.TrimPrefix(ns, l.Prefix)
	if len(peer) > 15 {
		peer = peer[:15]
	}
	l.Run("ip", "-n", bridgeNS, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.Run("ip", "-n", bridgeNS, "link", "set", peer, "master", "br0", "up")
	for _, a := range addrs {
		args := []string{"ip", "-n", ns, "addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		l.Run(args...)
	}
	l.Run("ip", "-n", ns, "link", "set", "eth0", "up")
}

// Do runs fn on a locked OS thread switched into ns (libcalico/netns);
// sockets fn creates stay in ns.
func Do(ns string, fn func() error) error { return netns.Do(netns.Path(ns), fn) }
