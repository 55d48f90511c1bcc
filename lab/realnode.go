package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
)

// This file is a real node (Options.Kubelet): in the node's network
// namespace, a containerd and a kubelet of its own, as on a host. Each
// node has a mount namespace of its own, in which the host paths a node's
// software uses are directories of the node's state (/var/lib/kubelet,
// /var/lib/containerd, /run/containerd, /opt/cni/bin, /etc/cni/net.d,
// /var/lib/calico, /run/calico, /var/log, /run/netns) and /sys/fs/bpf is
// a bpffs instance of its own, so several nodes share the machine without
// seeing each other's files, and a DaemonSet's hostPath on one node is
// that node's. Every process of the node, pods included, lives under the
// cgroup /pl-<lab>-<node> of each hierarchy, which is how `lab down`
// finds what is left even after the lab was killed.

// nodeHostPaths are the host paths each node has to itself.
var nodeHostPaths = []string{
	"/var/lib/kubelet", "/var/lib/containerd", "/run/containerd", "/opt/cni/bin", "/etc/cni/net.d",
	"/var/lib/calico", "/run/calico", "/var/log", "/run/netns",
}

// SandboxImage is the pod sandbox image the nodes' containerd runs, built
// by `make images` (no registry is reachable).
const SandboxImage = "registry.k8s.io/pause:3.10.2"

// ServiceCIDR is the lab's Service range (the API server's
// --service-cluster-ip-range).
const ServiceCIDR = "10.96.0.0/16"

// kubeletHealthPort is kubelet's healthz on the node's loopback.
const kubeletHealthPort = 10248

// hostDir is node's directory standing for a host path.
func (l *Lab) hostDir(node, hostPath string) string {
	return l.nodeDir(node, "host", strings.TrimPrefix(hostPath, "/"))
}

// mountNSDir holds the bind-mounted files of the nodes' mount namespaces
// (a private mount of its own, as a mount namespace file must be).
func (l *Lab) mountNSDir() string { return l.path("mntns") }

// mountNS is a node's mount namespace file.
func (l *Lab) mountNS(node string) string { return filepath.Join(l.mountNSDir(), node) }

// cgroupName is the cgroup of a node's processes, in every hierarchy.
func (l *Lab) cgroupName(node string) string { return l.st.Prefix + node }

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers,
// the named systemd one and the unified one of a hybrid host).
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		i := indexOf(f, "-")
		if i < 0 || i+1 >= len(f) || len(f) < 5 {
			continue
		}
		if t := f[i+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, f[4])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return out, nil
}

func indexOf(f []string, s string) int {
	for i, x := range f {
		if x == s {
			return i
		}
	}
	return -1
}

// makeNodeCgroups creates the node's cgroup and its system child (for
// containerd and kubelet) in every hierarchy; cpuset ones get the
// machine's CPUs and memory nodes, as v1 wants before a process joins.
func (l *Lab) makeNodeCgroups(node string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, dir := range []string{filepath.Join(h, l.cgroupName(node)), filepath.Join(h, l.cgroupName(node), "system")} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("node %s: creating cgroup %s: %w", node, dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					continue
				}
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("node %s: %s of %s: %w", node, f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeNodeCgroups kills every process left in the node's cgroups (pods
// whose shim is gone included) and removes them, deepest first.
func removeNodeCgroups(name string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	killed := map[int]bool{}
	defer func() { waitGone(killed, 5*time.Second) }()
	for attempt := 0; attempt < 50; attempt++ {
		errs = errs[:0]
		left := false
		for _, h := range hs {
			root := filepath.Join(h, name)
			if _, err := os.Stat(root); err != nil {
				continue
			}
			left = true
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if b, err := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); err == nil {
					for _, f := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(f); err == nil {
							_ = syscall.Kill(pid, syscall.SIGKILL)
							killed[pid] = true
						}
					}
				}
				if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
				}
			}
		}
		if !left || len(errs) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// waitGone waits, up to timeout, until every pid has exited: gone or a
// zombie left for its parent (often init, once lab up was killed) to
// reap. An emptied cgroup can be removed while its killed processes are
// still tearing down their memory.
func waitGone(pids map[int]bool, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for pid := range pids {
		for time.Now().Before(deadline) {
			st, _, err := procStat(pid)
			if err != nil || st == 'Z' || st == 'X' {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// labCgroups lists the node cgroups named with prefix (in any hierarchy).
func labCgroups(prefix string) []string {
	hs, _ := cgroupHierarchies()
	seen := map[string]bool{}
	var out []string
	for _, h := range hs {
		ents, _ := os.ReadDir(h)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// makeMountNS creates the node's mount namespace: a private copy of the
// machine's mounts with the node's directories bound over nodeHostPaths
// and a bpffs of its own on /sys/fs/bpf.
func (l *Lab) makeMountNS(ctx context.Context, node string) error {
	dir := l.mountNSDir()
	if err := l.ensurePrivateMount(dir); err != nil {
		return err
	}
	file := l.mountNS(node)
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	// The copy of the machine's mounts holds every named network
	// namespace and the other nodes' mount namespaces: dropped, so this
	// one never keeps them alive after they are deleted.
	script.WriteString("grep ' - nsfs ' /proc/self/mountinfo | awk '{print $5}' | while read -r m; do umount -l \"$m\" 2>/dev/null || true; done\n")
	for _, p := range nodeHostPaths {
		src := l.hostDir(node, p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&script, "mkdir -p %s\nmount --bind %s %s\n", p, src, p)
	}
	script.WriteString("mount -t bpf bpffs /sys/fs/bpf\n")
	if _, err := run(ctx, "unshare", "--mount="+file, "--propagation", "private", "sh", "-c", script.String()); err != nil {
		return fmt.Errorf("node %s: making its mount namespace: %w", node, err)
	}
	return nil
}

// ensurePrivateMount bind-mounts dir on itself with private propagation
// (once), so the mount namespace files in it do not propagate.
func (l *Lab) ensurePrivateMount(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if isMountPoint(dir) {
		return nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	return nil
}

// isMountPoint says whether path is a mount point in this mount
// namespace.
func isMountPoint(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// removeMountNamespaces unmounts the nodes' mount namespace files and
// their directory: the namespaces (and every mount in them: overlays,
// the pods' network namespaces, the bpffs) go once their processes have.
func removeMountNamespaces(dir string) error {
	ents, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	for i := 0; isMountPoint(dir) && i < 10; i++ {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", dir, err))
			break
		}
	}
	return errors.Join(errs...)
}

// inNodeArgv wraps argv to run in node's mount namespace and its system
// cgroup (the network namespace is start's).
func (l *Lab) inNodeArgv(node string, argv ...string) []string {
	join := fmt.Sprintf(`for f in /sys/fs/cgroup/*/%s/system/cgroup.procs; do echo $$ > "$f"; done; exec "$@"`, l.cgroupName(node))
	return append([]string{"nsenter", "--mount=" + l.mountNS(node), "--", "sh", "-c", join, "sh"}, argv...)
}

// containerdConfig is a node's containerd configuration: the CRI plugin
// with the lab's sandbox image, CNI from the node's /opt/cni/bin and
// /etc/cni/net.d, runc with cgroupfs. oom_score_adj is kept no lower than
// containerd's own: this machine does not give root CAP_SYS_RESOURCE, so
// the sandbox's -998 would fail to start every pod.
func containerdConfig() string {
	return `version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.tracing"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + SandboxImage + `"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
`
}

// kubeletConfig is a node's KubeletConfiguration.
func (l *Lab) kubeletConfig(n Node) string {
	files := kubeapi.FilesIn(l.path("kube", "pki"))
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are the v1 hierarchy: kubelet v1.37 refuses it
# unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [%s]
resolvConf: %s
# No registry: images are imported, never pulled, so never collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
maxPods: 110
`, l.cgroupName(n.Name), n.IP, kubeletHealthPort, files.CACert, ClusterDNS, l.path("kube", "resolv.conf"))
}

// startRealNode makes node n's cgroups, mount namespace and files, starts
// its containerd, imports the images into it and starts its kubelet.
func (l *Lab) startRealNode(ctx context.Context, n Node) error {
	// A host has a default route, which is what lets its own processes
	// (hostNetwork pods: calico-kube-controllers) connect to a Service
	// address before kube-proxy's DNAT in OUTPUT picks the endpoint. The
	// lab's nodes have none, so the Service range is routed onto the
	// fabric, which leads nowhere outside the lab.
	if _, err := run(ctx, "ip", "-n", n.NS, "route", "add", ServiceCIDR, "dev", "eth0"); err != nil {
		return err
	}
	if err := l.makeNodeCgroups(n.Name); err != nil {
		return err
	}
	if err := l.makeMountNS(ctx, n.Name); err != nil {
		return err
	}
	if err := l.provisionHost(n); err != nil {
		return err
	}
	files := kubeapi.FilesIn(l.path("kube", "pki"))
	cert, key, err := files.IssueClient("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	kubeconfig := l.nodeDir(n.Name, "kubelet.kubeconfig")
	if err := os.WriteFile(kubeconfig, files.ClientKubeconfig(kubeURL(), "system:node:"+n.Name, cert, key), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(l.nodeDir(n.Name, "containerd.toml"), []byte(containerdConfig()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(l.nodeDir(n.Name, "kubelet.yaml"), []byte(l.kubeletConfig(n)), 0o644); err != nil {
		return err
	}
	l.say("starting containerd on %s (log %s)", n.Name, l.nodeDir(n.Name, "containerd.log"))
	p, err := l.startNodeDaemon(n, "containerd", "containerd", "--config", l.nodeDir(n.Name, "containerd.toml"))
	if err != nil {
		return err
	}
	if err := l.waitContainerd(ctx, n, p); err != nil {
		return err
	}
	if err := l.importImages(ctx, n); err != nil {
		return err
	}
	return l.startKubelet(ctx, n, kubeconfig)
}

// startNodeDaemon runs one of a node's daemons (containerd, kubelet) in
// the node's namespaces and system cgroup under the lab's supervisor,
// which restarts it when it exits, as systemd does on a host; the
// supervisor is in the node's cgroup too, so lab down finds it even
// unrecorded.
func (l *Lab) startNodeDaemon(n Node, name string, argv ...string) (Proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return Proc{}, fmt.Errorf("finding the supervisor (this executable): %w", err)
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", SuperviseEnv + "=1"}
	p, err := start(n.NS, name+" "+n.Name, l.nodeDir(n.Name, name+".log"), l.inNodeArgv(n.Name, append([]string{exe}, argv...)...), env)
	if err != nil {
		return Proc{}, err
	}
	return p, l.recordProc(name+"/"+n.Name, p)
}

// hostCNIPlugins are the CNI plugins a node has before Palisade is
// installed (a kubeadm host's kubernetes-cni package): containerd's CRI
// plugin brings every sandbox's loopback up with loopback.
var hostCNIPlugins = []string{"loopback"}

// provisionHost puts on the node what its host would have from its own
// packages: the loopback CNI plugin in /opt/cni/bin (from Debian's
// containernetworking-plugins).
func (l *Lab) provisionHost(n Node) error {
	for _, p := range hostCNIPlugins {
		b, err := os.ReadFile(filepath.Join("/usr/lib/cni", p))
		if err != nil {
			return fmt.Errorf("node %s: the host's CNI plugin %s (Debian's containernetworking-plugins): %w", n.Name, p, err)
		}
		if err := os.WriteFile(filepath.Join(l.hostDir(n.Name, "/opt/cni/bin"), p), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// startKubelet starts node n's kubelet (its files made by
// startRealNode) and waits for its healthz.
func (l *Lab) startKubelet(ctx context.Context, n Node, kubeconfig string) error {
	l.say("starting kubelet on %s (log %s)", n.Name, l.nodeDir(n.Name, "kubelet.log"))
	// Under the supervisor, kubelet is started again when it exits (it
	// does when containerd's CRI is not serving yet after a restart).
	p, err := l.startNodeDaemon(n, "kubelet", filepath.Join(l.st.Options.KubeBinDir, "kubelet"),
		"--config="+l.nodeDir(n.Name, "kubelet.yaml"), "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--node-ip="+n.IP.String(), "--v=1")
	if err != nil {
		return err
	}
	return l.waitHTTP(ctx, n.NS, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthPort), p, "kubelet on "+n.Name, 60*time.Second)
}

// waitContainerd waits until `ctr version` answers on the node.
func (l *Lab) waitContainerd(ctx context.Context, n Node, p Proc) error {
	began := time.Now()
	for {
		_, err := l.NodeCtr(ctx, n.Name, "version")
		if err == nil {
			l.say("✓ containerd on %s is running (%s)", n.Name, time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if !p.Alive() || time.Since(began) > 30*time.Second || ctx.Err() != nil {
			return fmt.Errorf("containerd on %s not answering after %s: %v\n%s", n.Name, time.Since(began).Round(time.Second), err, tail(p.Log, 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NodeCtr runs ctr (namespace k8s.io) against node's containerd, in the
// node's namespaces, and returns its output.
func (l *Lab) NodeCtr(ctx context.Context, node string, args ...string) (string, error) {
	n, ok := l.Node(node)
	if !ok {
		return "", fmt.Errorf("lab %s: no node %q", l.st.Name, node)
	}
	argv := append([]string{"nsenter", "--mount=" + l.mountNS(node), "--", "ctr", "-n", "k8s.io"}, args...)
	var out string
	err := inNS(n.NS, func() (err error) {
		out, err = run(ctx, argv...)
		return err
	})
	return out, err
}

// importImages imports every OCI archive of the images directory into
// the node's containerd, as a user loads images on a node without a
// registry, and pins them (kubelet never removes a pinned image).
func (l *Lab) importImages(ctx context.Context, n Node) error {
	archives, err := l.imageArchives()
	if err != nil {
		return err
	}
	began := time.Now()
	for _, a := range archives {
		out, err := l.NodeCtr(ctx, n.Name, "images", "import", a)
		if err != nil {
			return fmt.Errorf("node %s: importing %s: %w", n.Name, a, err)
		}
		for _, line := range strings.Split(out, "\n") {
			// "unpacking <name> (sha256:…)...done"
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "unpacking" {
				if _, err := l.NodeCtr(ctx, n.Name, "images", "label", f[1], "io.cri-containerd.pinned=pinned"); err != nil {
					return fmt.Errorf("node %s: pinning %s: %w", n.Name, f[1], err)
				}
			}
		}
	}
	l.say("✓ %d image archive(s) imported on %s (%s)", len(archives), n.Name, time.Since(began).Round(10*time.Millisecond))
	return nil
}

// imageArchives are the OCI archives of Options.ImagesDir.
func (l *Lab) imageArchives() ([]string, error) {
	dir := l.st.Options.ImagesDir
	archives, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("no image archive (*.tar) in %s: run make images (or set PALISADE_IMAGES)", dir)
	}
	return archives, nil
}

// waitHTTP polls url from inside ns until it answers 200.
func (l *Lab) waitHTTP(ctx context.Context, ns, url string, p Proc, what string, timeout time.Duration) error {
	began := time.Now()
	var last error
	for {
		last = l.httpOK(ctx, ns, url)
		if last == nil {
			l.say("✓ %s healthy (%s)", what, time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if !p.Alive() || time.Since(began) > timeout || ctx.Err() != nil {
			return fmt.Errorf("%s not healthy after %s: %v\n%s", what, time.Since(began).Round(time.Second), last, tail(p.Log, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// httpOK GETs url from inside ns and wants 200.
func (l *Lab) httpOK(ctx context.Context, ns, url string) error {
	tr := &http.Transport{DialContext: l.dialIn(ns)}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// upRealNodes is Up's second half on real nodes: the control plane with
// kube-scheduler, each node's containerd and kubelet, kube-proxy, the
// BGP topology and felix's settings in the datastore, then Palisade
// installed from its manifest; it waits for every BGP session.
func (l *Lab) upRealNodes(ctx context.Context, nodes []Node) error {
	o := l.st.Options
	began := time.Now()
	if err := l.startKube(ctx); err != nil {
		return err
	}
	// Once, before the nodes start side by side.
	if err := l.ensurePrivateMount(l.mountNSDir()); err != nil {
		return err
	}
	errc := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errc <- l.startRealNode(ctx, n) }()
	}
	var errs []error
	for range nodes {
		errs = append(errs, <-errc)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if o.KubeProxy {
		if err := l.startKubeProxies(ctx, nodes); err != nil {
			return err
		}
	}
	// The API server reaches pods (its proxy, exec's port-forward,
	// webhooks) as a control-plane node would: its namespace routes the
	// pools through node 1, which has every node's routes by BGP.
	for _, pool := range l.poolCIDRs() {
		if _, err := run(ctx, "ip", "-n", l.kubeNS(), "route", "add", pool, "via", nodes[0].IP.String()); err != nil {
			return err
		}
	}
	if o.ReferenceCNI {
		if err := l.installReferenceCNI(ctx, nodes); err != nil {
			return err
		}
		return l.WaitNodesReady(ctx, 2*time.Minute)
	}
	if err := l.applyTopology(ctx, o.Peering); err != nil {
		return err
	}
	if o.BPF {
		l.say("calicoctl apply: FelixConfiguration default %s", bpfSpec(o.KubeProxy))
		if err := l.Apply(ctx, bpfFelixConfig(o.KubeProxy)); err != nil {
			return err
		}
	}
	if err := l.installPalisade(ctx); err != nil {
		return err
	}
	// The cluster DNS add-on, as a cluster has it (manifests/coredns.yaml).
	if err := l.installDNS(ctx); err != nil {
		return err
	}
	if o.Peering == PeeringNodeRR {
		for _, n := range nodeRRs(nodes) {
			if err := l.makeReflector(ctx, n); err != nil {
				return err
			}
		}
	}
	l.times.Agents = time.Since(began)
	if err := l.WaitNodesReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	var err error
	l.times.Sessions, err = l.WaitSessions(ctx, 90*time.Second)
	return err
}

// PodNetNS is the network namespace file of a pod on a real node (its
// sandbox's pause process's), found through the node's cgroups: for
// tests that run traffic from inside pods without going through
// Kubernetes (docs/lab.md).
func (l *Lab) PodNetNS(ctx context.Context, namespace, name string) (string, error) {
	kc, err := l.Kube()
	if err != nil {
		return "", err
	}
	pod, err := kc.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pod.Spec.NodeName == "" {
		return "", fmt.Errorf("pod %s/%s is not scheduled", namespace, name)
	}
	pids := l.cgroupPIDs(pod.Spec.NodeName, "pod"+string(pod.UID))
	for _, pid := range pids {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "pause" {
			return fmt.Sprintf("/proc/%d/ns/net", pid), nil
		}
	}
	return "", fmt.Errorf("pod %s/%s: no sandbox process on %s", namespace, name, pod.Spec.NodeName)
}

// NodeProcesses lists the pids of processes called comm running under a
// real node's cgroups (kubelet's pods included): "calico-node" is the
// DaemonSet's agent on that node.
func (l *Lab) NodeProcesses(node, comm string) []int {
	var out []int
	for _, pid := range l.cgroupPIDs(node, "") {
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(c)) == comm {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupPIDs lists the processes in node's cgroups (pids hierarchy)
// whose cgroup path has a component called part ("" for all).
func (l *Lab) cgroupPIDs(node, part string) []int {
	root := filepath.Join("/sys/fs/cgroup/pids", l.cgroupName(node))
	var pids []int
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if part != "" && !strings.Contains(p, "/"+part+"/") && !strings.HasSuffix(p, "/"+part) {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// KillNodeRuntime kills (-9) a real node's containerd and kubelet, not
// their supervisors: they come back as they do under systemd. The shims
// live on, so the node's containers keep running and containerd finds
// them again.
func (l *Lab) KillNodeRuntime(node string) []int {
	var pids []int
	for _, comm := range []string{"kubelet", "containerd"} {
		for _, pid := range l.NodeProcesses(node, comm) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// StopNodeRuntime stops a real node's kubelet and containerd for good
// (their supervisors); its containers keep running, as on a host whose
// kubelet is stopped.
func (l *Lab) StopNodeRuntime(node string) error {
	var errs []error
	for _, role := range []string{"kubelet/" + node, "containerd/" + node} {
		if p, ok := l.Proc(role); ok {
			errs = append(errs, p.Stop(15*time.Second))
		}
	}
	return errors.Join(errs...)
}

// referencePlugins are the reference CNI plugins ReferenceCNI installs.
var referencePlugins = []string{"bridge", "host-local", "portmap"}

// installReferenceCNI gives every node the reference plugins' network
// (Options.ReferenceCNI): a bridge with host-local addresses from
// 10.88.<index>.0/24, and routes to the other nodes' ranges via their
// addresses.
func (l *Lab) installReferenceCNI(ctx context.Context, nodes []Node) error {
	l.say("installing the reference CNI (bridge, host-local) instead of Palisade")
	subnet := func(n Node) string { return fmt.Sprintf("10.88.%d.0/24", n.Index) }
	for _, n := range nodes {
		for _, p := range referencePlugins {
			b, err := os.ReadFile(filepath.Join("/usr/lib/cni", p))
			if err != nil {
				return fmt.Errorf("the reference CNI plugin %s (Debian's containernetworking-plugins): %w", p, err)
			}
			if err := os.WriteFile(filepath.Join(l.hostDir(n.Name, "/opt/cni/bin"), p), b, 0o755); err != nil {
				return err
			}
		}
		conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "reference", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
]}
`, subnet(n))
		if err := os.WriteFile(filepath.Join(l.hostDir(n.Name, "/etc/cni/net.d"), "10-reference.conflist"), []byte(conf), 0o644); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return err
		}
		for _, m := range nodes {
			if m.Name == n.Name {
				continue
			}
			if _, err := run(ctx, "ip", "-n", n.NS, "route", "add", subnet(m), "via", m.IP.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

// poolCIDRs are the IPv4 ranges pods get addresses from.
func (l *Lab) poolCIDRs() []string {
	if l.st.Options.ReferenceCNI {
		return []string{"10.88.0.0/16"}
	}
	return []string{l.st.Options.PoolCIDR}
}
