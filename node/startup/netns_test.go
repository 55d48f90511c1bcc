package startup

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testNS is a network namespace made for one test and deleted when it
// ends, pass or fail.
type testNS struct {
	name   string
	handle *netlink.Handle
	ns     netns.NsHandle
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
}

func newNS(t *testing.T) *testNS {
	t.Helper()
	needRoot(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "plnode-" + hex.EncodeToString(b) + "-st"
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("opening netns %s: %v", name, err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", name, err)
	}
	t.Cleanup(h.Close)
	n := &testNS{name: name, handle: h, ns: ns}
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// ip runs `ip -n <ns> args...`.
func (n *testNS) ip(t *testing.T, args ...string) {
	t.Helper()
	run(t, "ip", append([]string{"-n", n.name}, args...)...)
}

// veth adds an up veth pair inside the namespace with addrs on name.
func (n *testNS) veth(t *testing.T, name, peer string, addrs ...string) {
	t.Helper()
	n.ip(t, "link", "add", name, "type", "veth", "peer", "name", peer)
	for _, a := range addrs {
		args := []string{"addr", "add", a, "dev", name}
		if strings.Contains(a, ":") {
			args = append([]string{"-6"}, append(args, "nodad")...)
		}
		n.ip(t, args...)
	}
	n.ip(t, "link", "set", peer, "up")
	n.ip(t, "link", "set", name, "up")
}

// do runs f on a thread inside the namespace. The thread is thrown away
// afterwards, so the test process's own namespace is never left changed.
func (n *testNS) do(t *testing.T, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := netns.Set(n.ns); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
