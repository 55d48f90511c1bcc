package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/libcalico/netns"
)

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = netns.Dir

// nsPath is the file of a named namespace.
func nsPath(name string) string { return netns.Path(name) }

// run runs a command and returns its output; the error carries the
// command line and what it printed.
func run(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// addNS creates a named namespace with its loopback up.
func addNS(ctx context.Context, name string) error {
	if _, err := os.Stat(nsPath(name)); err == nil {
		return fmt.Errorf("namespace %s already exists", name)
	}
	if _, err := run(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return err
	}
	return nil
}

// nsPIDs lists the processes living in a namespace, this one excepted.
func nsPIDs(name string) []int {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// delNS kills what still runs in a namespace and deletes it. A namespace
// that is already gone is not an error.
func delNS(ctx context.Context, name string) error {
	if _, err := os.Stat(nsPath(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, pid := range nsPIDs(name) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var err error
	for i := 0; i < 20; i++ {
		if _, err = run(ctx, "ip", "netns", "del", name); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// inNS runs fn on a locked OS thread switched into the named namespace
// (libcalico/netns). Sockets fn creates and processes it starts belong to
// that namespace.
func inNS(name string, fn func() error) error { return netns.Do(nsPath(name), fn) }

// attach links ns to the fabric's bridge: a veth named port in the fabric
// namespace, enslaved to br0, and eth0 holding addr in ns.
func attach(ctx context.Context, fabric, port, ns, addr string) error {
	steps := [][]string{
		{"ip", "-n", fabric, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", fabric, "link", "set", port, "master", "br0", "up"},
		{"ip", "-n", ns, "addr", "add", addr, "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if _, err := run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}
