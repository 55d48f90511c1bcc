package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Target resolves what exec and InNamespace accept: a node name, "rr",
// "border", "ext" (the client behind the border), "etcd" (or a cluster's "etcd1" to "etcd3"), "router" (a
// two-subnet lab's), "fabric", or a pod
// as "namespace/name".
func (l *Lab) Target(target string) (ns string, err error) {
	if n, ok := l.Node(target); ok {
		return n.NS, nil
	}
	if p, ok := l.Pod(target); ok {
		return p.NS, nil
	}
	switch target {
	case "fabric":
		return l.fabricNS(), nil
	case "rr", "border", "ext", "etcd", "etcd1", "etcd2", "etcd3", "router", "kube":
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, ns := range l.st.Namespaces {
			if ns == l.st.Prefix+target {
				return ns, nil
			}
		}
	}
	var names []string
	for _, n := range l.Nodes() {
		names = append(names, n.Name)
	}
	return "", fmt.Errorf("lab %s has no %q: want a node (%s), rr, border, ext, etcd, etcd1-3, router, kube, fabric or a pod namespace/name", l.st.Name, target, strings.Join(names, ", "))
}

// InNamespace runs fn on a thread inside the target's network namespace;
// sockets it opens stay there.
func (l *Lab) InNamespace(target string, fn func() error) error {
	ns, err := l.Target(target)
	if err != nil {
		return err
	}
	return inNS(ns, fn)
}

// Env is the environment of commands run in the lab: the lab's binaries
// first on PATH, calicoctl pointed at the lab's etcd with the join file's
// certificates, and on a node its run directory and nodename file.
func (l *Lab) Env(target string) []string {
	env := []string{}
	for _, e := range os.Environ() {
		switch {
		case strings.HasPrefix(e, "PATH="), strings.HasPrefix(e, "ETCD_"), strings.HasPrefix(e, "CALICO_"), strings.HasPrefix(e, "DATASTORE_TYPE="):
		default:
			env = append(env, e)
		}
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	tls := l.etcdClientFiles()
	env = append(env, "PATH="+l.st.Options.BinDir+":"+path, "DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS="+strings.Join(l.etcdEndpoints(), ","),
		"ETCD_CA_CERT_FILE="+tls.CA, "ETCD_CERT_FILE="+tls.ClientCert, "ETCD_KEY_FILE="+tls.ClientKey)
	if n, ok := l.Node(target); ok {
		env = append(env, "CALICO_RUN_DIR="+l.RunDir(n.Name), "CALICO_NODENAME_FILE="+l.nodeDir(n.Name, "nodename"))
	}
	return env
}

// Command prepares argv to run in the target's network namespace (only
// the network namespace: /sys and mounts stay the machine's) with Env.
// Start it with StartIn.
func (l *Lab) Command(ctx context.Context, target string, argv ...string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command to run in %s", target)
	}
	if _, err := l.Target(target); err != nil {
		return nil, err
	}
	argv = l.birdcArgs(target, argv)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if !strings.Contains(argv[0], "/") {
		// The lab's binaries come first, as on the PATH of Env.
		own := filepath.Join(l.st.Options.BinDir, argv[0])
		if st, err := os.Stat(own); err == nil && !st.IsDir() {
			cmd.Path, cmd.Err = own, nil
		}
	}
	cmd.Env = l.Env(target)
	return cmd, nil
}

// birdcArgs points a birdc run on the route reflector or the border
// router at that BIRD: its binary (BIRD 1.6's for a bird1 reflector) and
// its control socket, which lives in the lab's state directory rather
// than at birdc's default path. A given -s is kept.
func (l *Lab) birdcArgs(target string, argv []string) []string {
	if filepath.Base(argv[0]) != "birdc" || (target != "rr" && target != "border") {
		return argv
	}
	if _, ok := l.Proc("bird/" + target); !ok {
		return argv
	}
	for _, a := range argv[1:] {
		if a == "-s" || strings.HasPrefix(a, "-s") && len(a) > 2 {
			return argv
		}
	}
	ctl := argv[0]
	if _, c, err := l.birdBinaries(l.birdKind(target)); err == nil && !strings.Contains(argv[0], "/") {
		ctl = c
	}
	return append([]string{ctl, "-s", l.birdSocket(target)}, argv[1:]...)
}

// StartIn starts a command made by Command in its target's namespace.
func (l *Lab) StartIn(target string, cmd *exec.Cmd) error {
	return l.InNamespace(target, cmd.Start)
}

// Exec runs argv in the target's namespace with the given streams and
// returns its exit code.
func (l *Lab) Exec(ctx context.Context, target string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd, err := l.Command(ctx, target, argv...)
	if err != nil {
		return 0, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := l.StartIn(target, cmd); err != nil {
		return 0, fmt.Errorf("running %s in %s: %w", argv[0], target, err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// Output runs argv in the target's namespace and returns its output; a
// non-zero exit is an error carrying the output.
func (l *Lab) Output(ctx context.Context, target string, stdin io.Reader, argv ...string) (string, error) {
	var buf bytes.Buffer
	code, err := l.Exec(ctx, target, argv, stdin, &buf, &buf)
	if err != nil {
		return buf.String(), err
	}
	if code != 0 {
		return buf.String(), fmt.Errorf("%s in %s: exit %d: %s", strings.Join(argv, " "), target, code, strings.TrimSpace(buf.String()))
	}
	return buf.String(), nil
}

// Calicoctl runs the lab's calicoctl on a node with stdin (may be nil).
func (l *Lab) Calicoctl(ctx context.Context, node string, stdin io.Reader, args ...string) (string, error) {
	return l.Output(ctx, node, stdin, append([]string{"calicoctl"}, args...)...)
}

// Apply applies YAML resources with calicoctl on the first node.
func (l *Lab) Apply(ctx context.Context, yaml string) error {
	_, err := l.Calicoctl(ctx, l.Nodes()[0].Name, strings.NewReader(yaml), "apply", "-f", "-")
	return err
}
