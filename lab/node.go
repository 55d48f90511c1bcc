package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/palisade-net/palisade/node/status"
)

// nodeAddr is the fabric address of node index i.
func nodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)})
}

// nodeDir is a node's directory in the state directory.
func (l *Lab) nodeDir(name string, elem ...string) string {
	return l.path(append([]string{"nodes", name}, elem...)...)
}

// RunDir is the directory of a node's pid file and status socket (on a
// real node, its /var/run/calico, where the DaemonSet's calico-node
// keeps them).
func (l *Lab) RunDir(node string) string {
	if l.st.Options.Kubelet {
		return l.hostDir(node, "/run/calico")
	}
	return l.nodeDir(node, "run")
}

// addNodeNS creates the next node's namespace and files (not its agent).
func (l *Lab) addNodeNS(ctx context.Context) (Node, error) {
	l.mu.Lock()
	i := l.st.NextIndex
	l.st.NextIndex++
	l.mu.Unlock()
	if i > MaxNodes {
		return Node{}, fmt.Errorf("lab %s: no address left for node %d (at most %d)", l.st.Name, i, MaxNodes)
	}
	name := "node" + strconv.Itoa(i)
	n := Node{Name: name, Index: i, NS: l.st.Prefix + name}
	n.IP, n.IP6 = l.nodeAddrs(i)
	l.say("creating node %s: namespace %s, eth0 %s/24 on the fabric", name, n.NS, n.IP)
	if err := l.attachNode(ctx, n); err != nil {
		return Node{}, err
	}
	l.mu.Lock()
	l.st.Nodes = append(l.st.Nodes, n)
	err := l.save()
	l.mu.Unlock()
	if err != nil {
		return Node{}, err
	}
	// Proxy ARP answers the pods' ARP for their gateway 169.254.1.1 only
	// when the host has a route to it (Calico issue 3270); real hosts have
	// a default route, the lab has none, so the route stays on the node.
	if _, err := run(ctx, "ip", "-n", n.NS, "route", "add", "169.254.1.1/32", "dev", "lo"); err != nil {
		return Node{}, err
	}
	if err := os.MkdirAll(l.nodeDir(name, "run"), 0o755); err != nil {
		return Node{}, err
	}
	if err := l.writeCNIConf(n); err != nil {
		return Node{}, err
	}
	return n, nil
}

// nodeEnv is calico-node's environment, as a DaemonSet would give it.
func (l *Lab) nodeEnv(n Node) []string {
	o := l.st.Options
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"NODENAME=" + n.Name,
		"IP=" + netip.PrefixFrom(n.IP, 24).String(),
		"AS=" + strconv.Itoa(ClusterAS),
		"CALICO_IPV4POOL_CIDR=" + o.PoolCIDR,
		"CALICO_RUN_DIR=" + l.RunDir(n.Name),
		"CALICO_NODENAME_FILE=" + l.nodeDir(n.Name, "nodename"),
		"CALICO_ETCD_DATA_DIR=" + l.nodeDir(n.Name, "etcd"),
		"CALICO_LOG_LEVEL=" + o.LogLevel,
	}
	if o.Kubernetes {
		// As the DaemonSet's service account gives it: calico-node reads
		// Services and EndpointSlices (BGP service advertisement, felix's
		// Service rules) from the API server. The lab's API server runs
		// AlwaysAllow (no RBAC), so the admin kubeconfig grants no more
		// than any other would there.
		env = append(env, "CALICO_K8S_NODE_REF="+n.Name, "KUBECONFIG="+l.KubeconfigPath())
	}
	if o.Metrics {
		env = append(env, "FELIX_HEALTHENABLED=true", "FELIX_PROMETHEUSMETRICSENABLED=true", "BGP_PROMETHEUSMETRICSENABLED=true")
	}
	return append(env, l.overlayEnv(n)...)
}

// servesEtcd says whether n serves the lab's embedded etcd.
func (l *Lab) servesEtcd(n Node) bool {
	return l.st.Options.Etcd == EtcdEmbedded && n.Index == l.st.Nodes[0].Index
}

// nodeConfig is the calicoctl-style file calico-node reads: the join file,
// or for the node serving the embedded etcd an empty one (so a file on the
// machine at /etc/calico/calicoctl.cfg never leaks in).
func (l *Lab) nodeConfig(n Node) (string, error) {
	if !l.servesEtcd(n) {
		return l.JoinFile(), nil
	}
	path := l.nodeDir(n.Name, "calico-node.cfg")
	conf := "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nmetadata: {}\nspec:\n  datastoreType: etcdv3\n"
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// startNode runs calico-node (under the supervisor) in the node's
// namespace and waits until it serves its status.
func (l *Lab) startNode(ctx context.Context, n Node) error {
	cfg, err := l.nodeConfig(n)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the supervisor (this executable): %w", err)
	}
	role := "calico-node/" + n.Name
	log := l.nodeDir(n.Name, "calico-node.log")
	l.say("starting calico-node on %s (log %s)", n.Name, log)
	argv := []string{exe, filepath.Join(l.st.Options.BinDir, "calico-node"), "--config", cfg}
	p, err := start(n.NS, role, log, argv, append(l.nodeEnv(n), SuperviseEnv+"=1"))
	if err != nil {
		return err
	}
	if err := l.recordProc(role, p); err != nil {
		return err
	}
	if err := l.waitNodeReady(ctx, n, 30*time.Second); err != nil {
		return err
	}
	return l.waitMTU(ctx, n, 30*time.Second)
}

// waitNodeReady waits for the node's status socket to answer.
func (l *Lab) waitNodeReady(ctx context.Context, n Node, timeout time.Duration) error {
	sock := filepath.Join(l.RunDir(n.Name), status.SocketName)
	deadline := time.Now().Add(timeout)
	began := time.Now()
	for {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := status.Fetch(fctx, sock)
		cancel()
		if err == nil {
			l.say("✓ calico-node on %s is running (%s)", n.Name, time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if p, ok := l.Proc("calico-node/" + n.Name); !ok || !p.Alive() {
			return fmt.Errorf("calico-node on %s: its supervisor exited:\n%s", n.Name, tail(l.nodeDir(n.Name, "calico-node.log"), 2000))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("calico-node on %s: no status after %s: %v\n%s", n.Name, timeout, err, tail(l.nodeDir(n.Name, "calico-node.log"), 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AgentPID is the pid of the calico-node process on a node (not its
// supervisor), read from the pid file it keeps in its run directory.
func (l *Lab) AgentPID(node string) (int, error) {
	pid := status.RunningPID(filepath.Join(l.RunDir(node), status.PIDFileName))
	if pid == 0 {
		return 0, fmt.Errorf("calico-node on %s is not running", node)
	}
	return pid, nil
}

// AddNode adds a node to the running lab: namespace, route reflector and
// border configuration, calico-node; it waits for its sessions.
func (l *Lab) AddNode(ctx context.Context) (Node, error) {
	n, err := l.addNodeNS(ctx)
	if err != nil {
		return Node{}, err
	}
	if err := l.pinNeighbors(ctx, []Node{n}, l.Nodes()); err != nil {
		return n, err
	}
	if err := l.reconfigureBirds(ctx); err != nil {
		return n, err
	}
	if l.st.Options.Kubernetes {
		if err := l.registerKubeNode(ctx, n); err != nil {
			return n, err
		}
	}
	if err := l.startNode(ctx, n); err != nil {
		return n, err
	}
	if l.st.Options.KubeProxy {
		if err := l.startKubeProxy(ctx, n); err != nil {
			return n, err
		}
	}
	_, err = l.WaitSessions(ctx, 60*time.Second)
	return n, err
}

// RemoveNode takes a node out: its Node resource is deleted (its peers
// drop their sessions and its routes), calico-node stopped, its pods and
// namespace deleted.
func (l *Lab) RemoveNode(ctx context.Context, name string) error {
	n, ok := l.Node(name)
	if !ok {
		return fmt.Errorf("lab %s: no node %q", l.st.Name, name)
	}
	if l.servesEtcd(n) {
		return fmt.Errorf("lab %s: node %s serves the embedded etcd and cannot be removed", l.st.Name, name)
	}
	l.say("removing node %s", name)
	l.mu.Lock()
	l.st.Nodes = removeNode(l.st.Nodes, name)
	err := l.save()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if err := l.reconfigureBirds(ctx); err != nil {
		return err
	}
	if _, err := l.Calicoctl(ctx, l.Nodes()[0].Name, nil, "delete", "node", name); err != nil {
		return err
	}
	role := "calico-node/" + name
	for _, r := range []string{"kube-proxy/" + name, role} {
		if p, ok := l.Proc(r); ok {
			if err := p.Stop(10 * time.Second); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, p := range l.Pods() {
		if p.Node == name {
			errs = append(errs, l.forgetPod(ctx, p))
		}
	}
	errs = append(errs, l.forgetNS(ctx, n.NS))
	for _, m := range l.Nodes() {
		// Its pinned neighbour entry goes too (errors do not matter: the
		// address is never given to another node).
		_, _ = run(ctx, "ip", "-n", m.NS, "neigh", "del", n.IP.String(), "dev", "eth0")
	}
	l.mu.Lock()
	delete(l.st.Procs, role)
	delete(l.st.Procs, "kube-proxy/"+name)
	errs = append(errs, l.save())
	l.mu.Unlock()
	errs = append(errs, os.RemoveAll(l.nodeDir(name)))
	return errors.Join(errs...)
}

func removeNode(nodes []Node, name string) []Node {
	out := nodes[:0:0]
	for _, n := range nodes {
		if n.Name != name {
			out = append(out, n)
		}
	}
	return out
}
