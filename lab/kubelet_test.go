package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
	"github.com/palisade-net/palisade/libcalico/netns"
	"github.com/palisade-net/palisade/libcalico/testsupport/ipamreport"
	"github.com/palisade-net/palisade/libcalico/testsupport/udpflow"
)

// Tests of real nodes (lab up --kubelet): Palisade installed from its
// manifest and images, pods started by kubelet through containerd, and
// what an operator does to a running cluster.

// agnhostImage is the e2e suites' workload, built by make images.
const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// requireRealNodes skips a test that cannot run real nodes here.
func requireRealNodes(t testing.TB) {
	t.Helper()
	requireLab(t)
	if os.Getenv("PALISADE_BIN") == "" {
		t.Skip("real nodes run the installed images and install-cni: set PALISADE_BIN (make test does)")
	}
	if err := kubeapi.CheckBinDir(kubeapi.BinDir()); err != nil {
		t.Skip(err)
	}
	if os.Getenv("PALISADE_IMAGES") == "" {
		t.Skip("real nodes import the images of make images: set PALISADE_IMAGES (make test does)")
	}
}

// newRealLab brings up a lab of real nodes.
func newRealLab(t *testing.T, o Options) *Lab {
	t.Helper()
	requireRealNodes(t)
	o.Kubelet = true
	l := newLabTimeout(t, o, 5*time.Minute)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := l.KubectlOutput(context.Background(), "", "get", "pods", "-A", "-o", "wide")
			t.Logf("pods:\n%s", out)
			for _, n := range l.Nodes() {
				t.Logf("--- %s kubelet log (tail):\n%s", n.Name, tail(l.nodeDir(n.Name, "kubelet.log"), 2000))
			}
		}
	})
	return l
}

// kubectl runs kubectl and fails the test on error.
func kubectl(t *testing.T, l *Lab, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := l.KubectlOutput(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deployment is a Deployment of agnhost netexec servers (HTTP on 8080,
// UDP on 8081), spread over the nodes.
func deployment(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: %[1]s}}}
      containers:
      - name: netexec
        image: %[3]s
        args: ["netexec", "--http-port=8080", "--udp-port=8081"]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
`, name, replicas, agnhostImage)
}

// runningPods lists the Running pods of a label selector, by name.
func runningPods(t *testing.T, l *Lab, selector string) []corev1.Pod {
	t.Helper()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	list, err := kc.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// hostname asks a netexec server for its pod name from inside ns.
func hostname(ctx context.Context, ns string, addr netip.AddrPort) (string, error) {
	// The connection is dialled on a thread inside ns; the client's own
	// goroutines only read and write it.
	dial := func(ctx context.Context, network, a string) (c net.Conn, err error) {
		err = netns.Do(ns, func() (err error) {
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, a)
			return err
		})
		return c, err
	}
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr.String() + "/hostname")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", addr, resp.Status)
	}
	return string(body), err
}

// checkReachable wants every pod's server answering with its name from
// every node.
func checkReachable(t *testing.T, l *Lab, pods []corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	for _, n := range l.Nodes() {
		for _, p := range pods {
			addr := netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), 8080)
			var got string
			var err error
			for i := 0; i < 20; i++ {
				if got, err = hostname(ctx, nsPath(n.NS), addr); err == nil && got == p.Name {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if got != p.Name {
				t.Errorf("from %s, pod %s (%s on %s): got %q, %v", n.Name, p.Name, addr, p.Spec.NodeName, got, err)
			}
		}
	}
}

// ipamAllocations is calicoctl ipam check's report: the addresses IPAM
// holds, failing unless the check found no problem.
func ipamAllocations(t *testing.T, l *Lab) map[string]bool {
	t.Helper()
	report := filepath.Join(t.TempDir(), "ipam.json")
	out, err := l.Calicoctl(context.Background(), "node1", nil, "ipam", "check", "--show-problem-ips", "-o", report)
	if err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Check complete; found 0 problems.") {
		t.Errorf("calicoctl ipam check:\n%s", out)
	}
	rep := ipamreport.Read(t, report)
	if len(rep.LeakedHandles) != 0 {
		t.Errorf("ipam check: %d leaked handles", len(rep.LeakedHandles))
	}
	got := map[string]bool{}
	for ip := range rep.Allocations {
		got[ip] = true
	}
	return got
}

// podAddrs are the addresses of pods (and calico-kube-controllers and
// the DaemonSet, which run in the host's network and hold none).
func podAddrs(pods []corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		out[p.Status.PodIP] = true
	}
	return out
}

// podNetworkAddrs are the addresses of every pod, in any namespace, that
// runs in the pod network (the web pods and the CoreDNS add-on; not the
// host-network DaemonSet and controllers).
func podNetworkAddrs(t *testing.T, l *Lab) map[string]bool {
	t.Helper()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	list, err := kc.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range list.Items {
		if !p.Spec.HostNetwork && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out[p.Status.PodIP] = true
		}
	}
	return out
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestRealNodes installs Palisade on three real nodes from its manifest
// and images and puts it through what an operator does.
func TestRealNodes(t *testing.T) {
	beside(t, &realNodesLane)
	l := newRealLab(t, Options{Name: "kn", Nodes: 3})
	ctx := context.Background()

	t.Run("installed", func(t *testing.T) {
		out := kubectl(t, l, "", "-n", "kube-system", "get", "pods", "-l", "k8s-app=calico-node", "-o",
			`jsonpath={range .items[*]}{.spec.nodeName} {.status.containerStatuses[*].ready} {.status.initContainerStatuses[*].ready}{"\n"}{end}`)
		for _, n := range l.Nodes() {
			if !strings.Contains(out, n.Name+" true true") {
				t.Errorf("calico-node on %s is not ready (calico-node, install-cni):\n%s", n.Name, out)
			}
			for _, f := range []string{"/opt/cni/bin/calico", "/opt/cni/bin/calico-ipam", "/opt/cni/bin/portmap", "/opt/cni/bin/bandwidth",
				"/etc/cni/net.d/10-calico.conflist", "/etc/cni/net.d/calico-kubeconfig", "/etc/cni/net.d/calico-tls/etcd-ca"} {
				if _, err := os.Stat(filepath.Join(l.hostDir(n.Name, filepath.Dir(f)), filepath.Base(f))); err != nil {
					t.Errorf("install-cni on %s: %v", n.Name, err)
				}
			}
			conf, _ := os.ReadFile(filepath.Join(l.hostDir(n.Name, "/etc/cni/net.d"), "10-calico.conflist"))
			for _, want := range []string{`"type": "calico"`, `"type": "portmap"`, `"type": "bandwidth"`, `"nodename": "` + n.Name + `"`} {
				if !strings.Contains(string(conf), want) {
					t.Errorf("%s's conflist lacks %s:\n%s", n.Name, want, conf)
				}
			}
		}
		if out := kubectl(t, l, "", "-n", "kube-system", "get", "deploy", "calico-kube-controllers", "-o", "jsonpath={.status.availableReplicas}"); out != "1" {
			t.Errorf("calico-kube-controllers available replicas %q", out)
		}
	})

	t.Run("upstream e2e subset", func(t *testing.T) {
		// A few minutes of Kubernetes' own suites (hack/e2e.sh runs them
		// all): NetworkPolicy from the Netpol suite and the conformance
		// checks of pod networking, through e2e.test v1.37.2.
		focus := strings.Join([]string{
			`Netpol NetworkPolicy between server and client should support a 'default-deny-ingress' policy`,
			`Netpol NetworkPolicy between server and client should allow ingress access on one named port`,
			`Netpol NetworkPolicy between server and client should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector`,
			`Networking Granular Checks: Pods should function for intra-pod communication: (http|udp)`,
			`Networking Granular Checks: Pods should function for node-pod communication: http`,
		}, "|")
		runE2E(t, l, focus, 6)
	})

	t.Run("pods and hostPort", func(t *testing.T) {
		kubectl(t, l, deployment("web", 6), "apply", "-f", "-")
		kubectl(t, l, "", "rollout", "status", "deploy/web", "--timeout=3m")
		pods := runningPods(t, l, "app=web")
		if len(pods) != 6 {
			t.Fatalf("%d web pods running, want 6", len(pods))
		}
		checkReachable(t, l, pods)
		// A pod with a hostPort answers on its node's address (portmap).
		kubectl(t, l, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hostport, namespace: default, labels: {app: hostport}}
spec:
  nodeName: node2
  terminationGracePeriodSeconds: 1
  containers:
  - name: netexec
    image: %s
    args: ["netexec", "--http-port=8080"]
    ports: [{containerPort: 8080, hostPort: 30080}]
`, agnhostImage), "apply", "-f", "-")
		kubectl(t, l, "", "wait", "--for=condition=Ready", "pod/hostport", "--timeout=2m")
		n2, _ := l.Node("node2")
		for _, from := range []string{"node1", "node3"} {
			n, _ := l.Node(from)
			var got string
			var err error
			for i := 0; i < 40; i++ {
				if got, err = hostname(ctx, nsPath(n.NS), netip.AddrPortFrom(n2.IP, 30080)); err == nil {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if err != nil || got != "hostport" {
				nat, _ := l.Output(ctx, "node2", nil, "iptables-save", "-t", "nat")
				t.Errorf("hostPort 30080 on node2 from %s: %q, %v\nnode2's nat table:\n%s", from, got, err, nat)
			}
		}
		kubectl(t, l, "", "delete", "pod", "hostport", "--wait=true")
	})

	t.Run("rollout restart keeps every flow", func(t *testing.T) {
		pods := runningPods(t, l, "app=web")
		perNode := map[string]corev1.Pod{}
		for _, p := range pods {
			perNode[p.Spec.NodeName] = p
		}
		if len(perNode) != 3 {
			t.Fatalf("web pods on %d nodes, want 3", len(perNode))
		}
		var flows []*udpflow.Flow
		var names []string
		for from, src := range perNode {
			for to, dst := range perNode {
				if from == to {
					continue
				}
				f, err := podFlow(ctx, l, src, dst, 9000+len(flows))
				if err != nil {
					t.Fatal(err)
				}
				flows = append(flows, f)
				names = append(names, from+"→"+to)
			}
		}
		time.Sleep(time.Second)
		kubectl(t, l, "", "-n", "kube-system", "rollout", "restart", "ds/calico-node")
		kubectl(t, l, "", "-n", "kube-system", "rollout", "status", "ds/calico-node", "--timeout=5m")
		if _, err := l.WaitSessions(ctx, 90*time.Second); err != nil {
			t.Error(err)
		}
		time.Sleep(2 * time.Second)
		for i, f := range flows {
			lost, sent := f.Stop()
			if sent < 100 || len(lost) > 0 {
				t.Errorf("flow %s: %d of %d datagrams lost: %v", names[i], len(lost), sent, lost)
			}
		}
	})

	t.Run("node runtime killed", func(t *testing.T) {
		before := runningPods(t, l, "app=web")
		agents := l.NodeProcesses("node2", "calico-node")
		if len(agents) == 0 {
			t.Fatal("no calico-node process on node2")
		}
		// kubelet, containerd (and the shims) -9, then calico-node: the
		// supervisors start containerd and kubelet again as systemd
		// would, and kubelet brings calico-node back.
		if killed := l.KillNodeRuntime("node2"); len(killed) < 2 {
			t.Fatalf("killed %v on node2, want at least kubelet and containerd", killed)
		}
		for _, pid := range agents {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Second)
		kubectl(t, l, "", "-n", "kube-system", "rollout", "status", "ds/calico-node", "--timeout=3m")
		if _, err := l.WaitSessions(ctx, 90*time.Second); err != nil {
			t.Error(err)
		}
		kubectl(t, l, "", "wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=2m")
		after := runningPods(t, l, "app=web")
		if !sameSet(podAddrs(before), podAddrs(after)) {
			t.Errorf("pod addresses changed: %v → %v", podAddrs(before), podAddrs(after))
		}
		checkReachable(t, l, after)
		if got, want := ipamAllocations(t, l), podNetworkAddrs(t, l); !sameSet(got, want) {
			t.Errorf("IPAM holds %v, the pods in the pod network %v", got, want)
		}
	})

	t.Run("delete and scale release addresses", func(t *testing.T) {
		pods := runningPods(t, l, "app=web")
		kubectl(t, l, "", "delete", "pod", pods[0].Name, "--wait=true")
		kubectl(t, l, "", "rollout", "status", "deploy/web", "--timeout=2m")
		kubectl(t, l, "", "scale", "deploy/web", "--replicas=0")
		waitNoPods(t, l, "app=web")
		base := ipamAllocations(t, l)
		for round := 1; round <= 3; round++ {
			kubectl(t, l, "", "scale", "deploy/web", "--replicas=30")
			kubectl(t, l, "", "rollout", "status", "deploy/web", "--timeout=5m")
			if got := ipamAllocations(t, l); len(got) != len(base)+30 {
				t.Errorf("round %d: IPAM holds %d addresses with 30 pods, %d before", round, len(got), len(base))
			}
			kubectl(t, l, "", "scale", "deploy/web", "--replicas=0")
			waitNoPods(t, l, "app=web")
			if got := ipamAllocations(t, l); !sameSet(got, base) {
				t.Errorf("round %d: IPAM holds %v after scaling to 0, %v before", round, got, base)
			}
		}
	})

	t.Run("node deleted", func(t *testing.T) {
		kubectl(t, l, "", "scale", "deploy/web", "--replicas=6")
		kubectl(t, l, "", "rollout", "status", "deploy/web", "--timeout=3m")
		if err := l.StopNodeRuntime("node3"); err != nil {
			t.Fatal(err)
		}
		kubectl(t, l, "", "delete", "node", "node3")
		deadline := time.Now().Add(2 * time.Minute)
		for {
			nodes, _ := l.Calicoctl(ctx, "node1", nil, "get", "nodes")
			weps, _ := l.Calicoctl(ctx, "node1", nil, "get", "workloadendpoints", "-A", "-o", "wide")
			blocks, _ := l.Calicoctl(ctx, "node1", nil, "ipam", "show", "--show-blocks")
			aff, _ := l.Calicoctl(ctx, "node1", nil, "get", "blockaffinities", "-o", "wide")
			if !strings.Contains(nodes, "node3") && !strings.Contains(weps, "node3") && !strings.Contains(aff, "node3") {
				t.Logf("node3 cleaned up:\n%s\n%s", nodes, blocks)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node3 not cleaned up after 2m:\n%s\n%s\n%s", nodes, weps, aff)
			}
			time.Sleep(time.Second)
		}
	})
}

// waitNoPods waits until no pod of selector exists.
func waitNoPods(t *testing.T, l *Lab, selector string) {
	t.Helper()
	kc, err := l.Kube()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		list, err := kc.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods %s still there after 3m: %v", selector, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// podFlow starts a UDP flow (every 10 ms) from a socket in src's network
// namespace to one in dst's, both pods' addresses.
func podFlow(ctx context.Context, l *Lab, src, dst corev1.Pod, port int) (*udpflow.Flow, error) {
	srcNS, err := l.PodNetNS(ctx, src.Namespace, src.Name)
	if err != nil {
		return nil, err
	}
	dstNS, err := l.PodNetNS(ctx, dst.Namespace, dst.Name)
	if err != nil {
		return nil, err
	}
	var rc, sc *net.UDPConn
	if err := netns.Do(dstNS, func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(dst.Status.PodIP), Port: port})
		return err
	}); err != nil {
		return nil, fmt.Errorf("listening in %s: %w", dst.Name, err)
	}
	if err := netns.Do(srcNS, func() (err error) {
		sc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(dst.Status.PodIP), Port: port})
		return err
	}); err != nil {
		rc.Close()
		return nil, fmt.Errorf("dialling from %s: %w", src.Name, err)
	}
	return udpflow.Start(rc, sc, 10*time.Millisecond, 32), nil
}

// runE2E runs e2e.test (under ginkgo, two processes) from the control
// plane's namespace with focus, and fails unless wantSpecs specs ran and
// every one passed.
func runE2E(t *testing.T, l *Lab, focus string, wantSpecs int) {
	t.Helper()
	bin := kubeapi.BinDir()
	for _, b := range []string{"e2e.test", "ginkgo"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s is not in %s (hack/kube-tools.sh builds it)", b, bin)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), "--procs=2", "--no-color", "--focus="+focus,
		filepath.Join(bin, "e2e.test"), "--", "--kubeconfig="+l.KubeconfigPath(), "--provider=skeleton",
		"--kubectl-path="+filepath.Join(bin, "kubectl"), "--report-dir="+dir)
	cmd.Dir = dir
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := l.InNamespace("kube", cmd.Run)
	summary := regexp.MustCompile(`(?m)^Ran (\d+) of \d+ Specs.*$|^(SUCCESS|FAIL)!.*$`).FindAllString(out.String(), -1)
	t.Logf("e2e.test: %s", strings.Join(summary, "; "))
	if err != nil || len(summary) < 2 || !strings.HasPrefix(summary[len(summary)-1], "SUCCESS!") {
		t.Fatalf("e2e.test: %v\n%s", err, lastLines(out.String(), 120))
	}
	if m := regexp.MustCompile(`^Ran (\d+) of`).FindStringSubmatch(summary[0]); m == nil || m[1] != strconv.Itoa(wantSpecs) {
		t.Errorf("e2e.test ran other than the %d focused specs: %s", wantSpecs, summary[0])
	}
}

// TestRealNodesDownAfterKill kills `lab up --kubelet` (-9) while its
// node runs pods, then wants `lab down` to leave no process, cgroup,
// mount or namespace of it.
func TestRealNodesDownAfterKill(t *testing.T) {
	beside(t, &otherLane)
	requireRealNodes(t)
	name := uniqueName("kk")
	prefix := "pl-" + name + "-"
	up := exec.Command(filepath.Join(binDir, "lab"), "up", "--name", name, "--kubelet", "--nodes", "1",
		"--state-dir", testRoot, "--bin-dir", binDir)
	var out strings.Builder
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once the DaemonSet's calico-node runs on the node: pods,
	// shims, overlay mounts and the node's mount namespace all exist.
	deadline := time.Now().Add(4 * time.Minute)
	for len(processesIn(prefix, "calico-node")) == 0 {
		if time.Now().After(deadline) {
			_ = up.Process.Kill()
			_ = up.Wait()
			t.Fatalf("calico-node never ran on the lab's node:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = up.Process.Kill()
	_ = up.Wait()
	down := exec.Command(filepath.Join(binDir, "lab"), "down", "--name", name, "--state-dir", testRoot)
	if b, err := down.CombinedOutput(); err != nil {
		t.Fatalf("lab down after kill -9 of lab up: %v\n%s", err, b)
	}
	if pids := processesIn(prefix, ""); len(pids) > 0 {
		t.Errorf("processes left in the lab's cgroups: %v", pids)
	}
	if cgs := labCgroups(prefix); len(cgs) > 0 {
		t.Errorf("cgroups left: %v", cgs)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, filepath.Join(testRoot, name)) {
			t.Errorf("mount left: %s", line)
		}
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(testRoot, name)); err == nil {
		t.Errorf("state directory %s left", filepath.Join(testRoot, name))
	}
}

// processesIn lists the processes (called comm, or all) whose cgroup is
// under one named with prefix.
func processesIn(prefix, comm string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/"+prefix) {
			continue
		}
		// A zombie has exited; reaping it is its parent's business.
		if st, _, err := procStat(pid); err != nil || st == 'Z' || st == 'X' {
			continue
		}
		if c, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); comm == "" || strings.TrimSpace(string(c)) == comm {
			pids = append(pids, pid)
		}
	}
	return pids
}
