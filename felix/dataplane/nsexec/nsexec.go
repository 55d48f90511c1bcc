// Package nsexec runs the dataplane's kernel work — commands such as
// iptables-restore and ipset, and netlink calls — inside one chosen network
// namespace, so felix can program a node namespace from any process.
package nsexec

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/vishvananda/netns"

	palns "github.com/palisade-net/palisade/libcalico/netns"
)

// Runner runs work in a network namespace. The zero Runner (no path) runs
// in the caller's namespace.
type Runner struct {
	path   string
	target netns.NsHandle
	set    bool // target is open
	warm   warmPool
}

// New opens the namespace at path (for example /run/netns/node-a); an
// empty path means the current namespace.
func New(path string) (*Runner, error) {
	r := &Runner{path: path}
	if path == "" {
		return r, nil
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	r.target, r.set = h, true
	return r, nil
}

// Path is the namespace path ("" for the current one).
func (r *Runner) Path() string { return r.path }

// Handle returns the namespace handle, or -1 for the current namespace.
func (r *Runner) Handle() netns.NsHandle {
	if r == nil || !r.set {
		return -1
	}
	return r.target
}

// Close kills the idle warm processes and releases the namespace handle.
func (r *Runner) Close() error {
	r.closeWarm()
	if r.set {
		r.set = false
		return r.target.Close()
	}
	return nil
}

// Do runs fn on an OS thread that is in the namespace. A process started
// by fn (os/exec) inherits the namespace.
func (r *Runner) Do(fn func() error) error {
	if r == nil || !r.set {
		return fn()
	}
	return palns.DoIn(r.target, r.path, fn)
}

// Run runs a command in the namespace with stdin as its input and returns
// its standard output. The error carries the command's standard error.
func (r *Runner) Run(ctx context.Context, stdin string, name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	err := r.Do(func() error {
		cmd := exec.CommandContext(ctx, name, args...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd.Run()
	})
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
