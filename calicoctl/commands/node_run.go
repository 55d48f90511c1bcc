package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/node/status"
)

// nodeRunOptions are the flags of `calicoctl node run`.
type nodeRunOptions struct {
	ip, ip6, as, name, ipMethod, ip6Method string
	backend, nodeBinary, nodeImage         string
	noDefaultPools, dryrun, initSystem     bool
	waitTimeout                            time.Duration
}

func newNodeRunCommand(a *app, nf *nodeFlags) *cobra.Command {
	o := &nodeRunOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Start calico-node on this host as a local daemon",
		Long: `Start calico-node on this host as a local daemon process (Palisade runs no
container). The calico-node binary is the one beside calicoctl, else the one
on PATH, else --node-binary. Its output goes to <log-dir>/calico-node.log.
calicoctl waits until the node is registered and its status socket answers.

The datastore settings (--config, ETCD_ENDPOINTS, ETCD_*) are handed to
calico-node; with no etcd endpoint configured, calico-node serves an embedded
etcd on the node address and 127.0.0.1:2379.

With --init-system calico-node replaces calicoctl in the foreground, for an
init system to supervise. --dryrun prints what would run and starts nothing.
Refuses to start when calico-node already runs here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.nodeRun(cmd.Context(), nf, o, cmd.Flags().Changed("config"))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.ip, "ip", "", "IPv4 address of this node, with or without prefix length, autodetect or none (default: the stored address, else autodetect).")
	fl.StringVar(&o.ip6, "ip6", "", "IPv6 address of this node, autodetect or none (default none).")
	fl.StringVar(&o.as, "as", "", "AS number of this node (default: the cluster's).")
	fl.StringVar(&o.name, "name", "", "Node name (default: the host name).")
	fl.StringVar(&o.ipMethod, "ip-autodetection-method", "", "first-found, can-reach=<ip>, interface=<regex>, skip-interface=<regex> or cidr=<cidr,...> (default first-found).")
	fl.StringVar(&o.ip6Method, "ip6-autodetection-method", "", "IPv6 autodetection method (default first-found).")
	fl.StringVar(&nf.logDir, "log-dir", defaultLogDir, "Directory of calico-node's log file.")
	fl.StringVar(&o.backend, "backend", "bird", "Networking backend: bird (the embedded GoBGP), gobgp, vxlan or none.")
	fl.BoolVar(&o.noDefaultPools, "no-default-ippools", false, "Do not create the default IP pools.")
	fl.BoolVar(&o.dryrun, "dryrun", false, "Print what would run, and start nothing.")
	fl.BoolVar(&o.initSystem, "init-system", false, "Run calico-node in the foreground (for an init system).")
	fl.StringVar(&o.nodeBinary, "node-binary", "", "Path of the calico-node binary (default: beside calicoctl, else on PATH).")
	fl.StringVar(&o.nodeImage, "node-image", "", "Accepted for compatibility and ignored: Palisade runs calico-node as a process, not a container.")
	fl.DurationVar(&o.waitTimeout, "wait-timeout", 60*time.Second, "How long to wait for calico-node to come up.")
	return cmd
}

// nodeEnv is the environment calico-node is given, Calico's variable names.
func (o *nodeRunOptions) nodeEnv(nf *nodeFlags) map[string]string {
	env := map[string]string{
		"CALICO_NETWORKING_BACKEND": o.backend,
		"CALICO_RUN_DIR":            nf.runDir,
	}
	for k, v := range map[string]string{
		"NODENAME": o.name, "IP": o.ip, "IP6": o.ip6, "AS": o.as,
		"IP_AUTODETECTION_METHOD": o.ipMethod, "IP6_AUTODETECTION_METHOD": o.ip6Method,
	} {
		if v != "" {
			env[k] = v
		}
	}
	if o.noDefaultPools {
		env["NO_DEFAULT_POOLS"] = "true"
	}
	return env
}

func (a *app) nodeRun(ctx context.Context, nf *nodeFlags, o *nodeRunOptions, configGiven bool) error {
	switch o.backend {
	case "bird", "gobgp", "vxlan", "none":
	default:
		return fmt.Errorf("invalid --backend %q: want bird, gobgp, vxlan or none", o.backend)
	}
	if o.nodeImage != "" {
		fmt.Fprintf(a.env.ErrOut, "Ignoring --node-image=%s: calico-node runs as a local process.\n", o.nodeImage)
	}
	if pid := status.RunningPID(nf.pidFile()); pid != 0 {
		return fmt.Errorf("calico-node is already running on this host (pid %d, from %s); stop it first", pid, nf.pidFile())
	}
	bin, err := findNodeBinary(o.nodeBinary)
	if err != nil && !o.dryrun {
		return err
	}
	if bin == "" {
		bin = "calico-node"
	}
	args := []string{bin}
	if configGiven || a.configPath != DefaultConfigPath {
		args = append(args, "--config", a.configPath)
	}
	env := o.nodeEnv(nf)
	logFile := filepath.Join(nf.logDir, "calico-node.log")

	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var envList []string
	for _, k := range keys {
		envList = append(envList, k+"="+env[k])
	}
	if ep := firstNonEmpty(a.env.Getenv("ETCD_ENDPOINTS"), a.env.Getenv("CALICO_ETCD_ENDPOINTS")); ep != "" {
		envList = append(envList, "ETCD_ENDPOINTS="+ep)
	}
	if o.dryrun {
		fmt.Fprintln(a.env.Out, "Would run calico-node with this environment:")
		for _, kv := range envList {
			fmt.Fprintf(a.env.Out, "  %s\n", kv)
		}
		fmt.Fprintf(a.env.Out, "Command: %s\n", strings.Join(args, " "))
		if o.initSystem {
			fmt.Fprintln(a.env.Out, "It would run in the foreground (--init-system), logging to stdout and stderr.")
		} else {
			fmt.Fprintf(a.env.Out, "It would run as a daemon, logging to %s.\n", logFile)
		}
		if err != nil {
			fmt.Fprintf(a.env.Out, "Note: %v\n", err)
		}
		return nil
	}
	procEnv := append(os.Environ(), envList...)
	if o.initSystem {
		// Replace calicoctl so the init system supervises calico-node itself.
		return syscall.Exec(bin, args, procEnv)
	}
	if err := os.MkdirAll(nf.logDir, 0o755); err != nil {
		return fmt.Errorf("log directory %s: %w", nf.logDir, err)
	}
	lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, args[1:]...)
	cmd.Env = procEnv
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	fmt.Fprintf(a.env.Out, "Running calico-node (pid %d), logging to %s\n", cmd.Process.Pid, logFile)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintln(a.env.Out, "Waiting for calico-node to register this node...")
	deadline := time.After(o.waitTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("calico-node exited before it was ready (%v); last log lines:\n%s", err, tail(logFile, 15))
		case <-deadline:
			return fmt.Errorf("calico-node (pid %d) did not become ready within %s; it keeps running, see %s", cmd.Process.Pid, o.waitTimeout, logFile)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			fctx, cancel := context.WithTimeout(ctx, time.Second)
			rep, err := status.Fetch(fctx, nf.socket())
			cancel()
			if err == nil && rep.PID == cmd.Process.Pid {
				fmt.Fprintf(a.env.Out, "Calico node %q started successfully.\n", rep.NodeName)
				return nil
			}
		}
	}
}

// findNodeBinary picks calico-node: explicit, beside calicoctl, on PATH.
func findNodeBinary(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("--node-binary: %w", err)
		}
		return explicit, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "calico-node")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("calico-node")
	if err != nil {
		return "", errors.New("calico-node binary not found beside calicoctl or on PATH; give --node-binary")
	}
	return p, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
