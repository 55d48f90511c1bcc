package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// kube-proxy on the nodes (Options.KubeProxy): the real one, in iptables
// mode, in each node's namespace, watching the lab's API server, so
// Services carry traffic as in a cluster. And the client behind the border
// router that reaches them from outside.

// Ports kube-proxy serves inside a node's namespace.
const (
	kubeProxyHealthPort  = 10256
	kubeProxyMetricsPort = 10249
)

// The external namespace behind the border router (with Options.Border):
// the client of the outside network the border announces.
var (
	extAddr    = netip.MustParseAddr("198.19.0.10")
	extGateway = netip.MustParseAddr("198.19.0.1")
)

// ExternalAddr is the address of the lab's external namespace ("ext"),
// a client behind the border router.
func ExternalAddr() netip.Addr { return extAddr }

// extNS is the external namespace.
func (l *Lab) extNS() string { return l.st.Prefix + "ext" }

// makeExternal creates the external namespace on a link of its own to the
// border router (which forwards between it and the fabric): eth0
// 198.19.0.10/24, routed to the fabric's 198.18.0.0/15 through the border.
// The border announces 198.19.0.0/24 to the nodes, so answers come back.
func (l *Lab) makeExternal(ctx context.Context) error {
	border := l.st.Prefix + "border"
	l.say("creating the external namespace %s: eth0 %s/24 behind the border router (%s on its ext0)", l.extNS(), extAddr, extGateway)
	ns, err := l.newNS(ctx, "ext")
	if err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "-n", border, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", border, "addr", "add", netip.PrefixFrom(extGateway, 24).String(), "dev", "ext0"},
		{"ip", "-n", border, "link", "set", "ext0", "up"},
		{"ip", "netns", "exec", border, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(extAddr, 24).String(), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "route", "add", "198.18.0.0/15", "via", extGateway.String()},
	}
	for _, s := range steps {
		if _, err := run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// kubeProxyArgv is kube-proxy's command line on node n: iptables mode,
// the lab's pools as the cluster CIDR, the lab's node name (so
// externalTrafficPolicy: Local finds the node's endpoints), and the
// machine-wide conntrack settings left alone.
func (l *Lab) kubeProxyArgv(n Node, kubeconfig string) []string {
	o := l.st.Options
	cidrs := o.PoolCIDR
	if o.IPv6 {
		cidrs += "," + PoolCIDR6
	}
	return []string{filepath.Join(o.KubeBinDir, "kube-proxy"),
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + n.Name,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + cidrs,
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		fmt.Sprintf("--healthz-bind-address=%s:%d", n.IP, kubeProxyHealthPort),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", kubeProxyMetricsPort),
		"--v=1",
	}
}

// startKubeProxy runs kube-proxy (under the supervisor, as its DaemonSet
// restarts it) in the node's namespace with a kubeconfig of its own, and
// waits until it has programmed its rules once (healthz 200).
func (l *Lab) startKubeProxy(ctx context.Context, n Node) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the supervisor (this executable): %w", err)
	}
	admin, err := os.ReadFile(l.KubeconfigPath())
	if err != nil {
		return fmt.Errorf("kube-proxy on %s: reading the lab's kubeconfig: %w", n.Name, err)
	}
	kc := l.nodeDir(n.Name, "kube-proxy.kubeconfig")
	if err := os.WriteFile(kc, admin, 0o600); err != nil {
		return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
	}
	if !l.st.Options.Kubelet {
		// As on real nodes (startRealNode): a host's own connections to
		// a Service address need a route before kube-proxy's DNAT in
		// OUTPUT picks the endpoint; the lab's nodes have no default
		// route. (felix's connect-time load balancer needs none.)
		if _, err := run(ctx, "ip", "-n", n.NS, "route", "replace", ServiceCIDR, "dev", "eth0"); err != nil {
			return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
		}
	}
	role := "kube-proxy/" + n.Name
	logPath := l.nodeDir(n.Name, "kube-proxy.log")
	l.say("starting kube-proxy (iptables mode) on %s (log %s)", n.Name, logPath)
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", SuperviseEnv + "=1"}
	p, err := start(n.NS, role, logPath, append([]string{exe}, l.kubeProxyArgv(n, kc)...), env)
	if err != nil {
		return err
	}
	if err := l.recordProc(role, p); err != nil {
		return err
	}
	began := time.Now()
	deadline := began.Add(60 * time.Second)
	for {
		err := l.kubeProxyHealthy(ctx, n)
		if err == nil {
			l.say("✓ kube-proxy on %s synced (%s)", n.Name, time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if !p.Alive() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("kube-proxy on %s not healthy after %s: %v\n%s", n.Name, time.Since(began).Round(time.Second), err, tail(logPath, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeProxyHealthy asks kube-proxy's healthz on node n (200 once its rules
// are in place and recent).
func (l *Lab) kubeProxyHealthy(ctx context.Context, n Node) error {
	return l.httpOK(ctx, n.NS, fmt.Sprintf("http://%s/healthz", netip.AddrPortFrom(n.IP, kubeProxyHealthPort)))
}

// startKubeProxies starts kube-proxy on the nodes at once.
func (l *Lab) startKubeProxies(ctx context.Context, nodes []Node) error {
	errc := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errc <- l.startKubeProxy(ctx, n) }()
	}
	var errs []error
	for range nodes {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// kubeProxyStatus is the line `lab status` prints for a node's kube-proxy.
func (l *Lab) kubeProxyStatus(ctx context.Context, n Node) string {
	p, ok := l.Proc("kube-proxy/" + n.Name)
	if !ok {
		return ""
	}
	state := "not running"
	if p.Alive() {
		state = "running, healthz ok"
		if err := l.kubeProxyHealthy(ctx, n); err != nil {
			state = "running, healthz: " + strings.TrimSpace(err.Error())
		}
	}
	return fmt.Sprintf("kube-proxy (iptables mode, hostname %s): %s (log %s)\n", n.Name, state, p.Log)
}
