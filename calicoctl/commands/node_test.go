package commands_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/node/status"
)

var (
	nodeBinOnce sync.Once
	nodeBin     string
	nodeBinErr  error
)

// calicoNode returns the calico-node binary: $PALISADE_BIN/calico-node or
// one built once for this test run.
func calicoNode(t *testing.T) string {
	t.Helper()
	nodeBinOnce.Do(func() {
		if dir := os.Getenv("PALISADE_BIN"); dir != "" {
			nodeBin = filepath.Join(dir, "calico-node")
			return
		}
		dir, err := os.MkdirTemp("", "calico-node-test-")
		if err != nil {
			nodeBinErr = err
			return
		}
		nodeBinDir = dir // removed by TestMain
		nodeBin = filepath.Join(dir, "calico-node")
		if out, err := exec.Command("go", "build", "-o", nodeBin, "../../node/cmd/calico-node").CombinedOutput(); err != nil {
			nodeBinErr = fmt.Errorf("building calico-node: %v\n%s", err, out)
		}
	})
	if nodeBinErr != nil {
		t.Fatal(nodeBinErr)
	}
	return nodeBin
}

// runCtl runs calicoctl with exactly env (plus PATH), inside netns ns when
// it is not empty.
func runCtl(t *testing.T, ns string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := append([]string{binary}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running calicoctl %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

func TestNodeStatusGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  status.Report
	}{
		{"node-status-mesh.txt", status.Report{BGPRunning: true, Peers: []status.PeerStatus{
			{Address: "10.0.0.101", Type: status.PeerTypeMesh, State: "up", Since: "15:53:18", Info: "Established"},
			{Address: "10.0.0.102", Type: status.PeerTypeMesh, State: "up", Since: "15:53:18", Info: "Established"},
		}}},
		{"node-status-global.txt", status.Report{BGPRunning: true, Peers: []status.PeerStatus{
			{Address: "10.0.0.1", Type: status.PeerTypeGlobal, State: "up", Since: "03:43:38", Info: "Established"},
		}}},
		{"node-status-mixed-v6.txt", status.Report{BGPRunning: true, Peers: []status.PeerStatus{
			{Address: "198.18.0.3", Type: status.PeerTypeNodeSpecific, State: "start", Since: "2024-05-01", Info: "Active Socket: Connection refused"},
			{Address: "aa:bb::ff", Type: status.PeerTypeNodeSpecific, State: "up", Since: "09:00:01", Info: "Established", IPv6: true},
			{Address: "198.18.0.4", Type: status.PeerTypeMesh, State: "up", Since: "09:00:00", Info: "Established"},
		}}},
		{"node-status-no-peers.txt", status.Report{BGPRunning: true}},
		{"node-status-no-bgp.txt", status.Report{Backend: "vxlan"}},
		{"node-status-datastore-down.txt", status.Report{BGPRunning: true,
			Datastore: &status.DatastoreStatus{Endpoints: []string{"https://198.18.0.11:2379"}, Since: time.Date(2024, 5, 1, 9, 0, 0, 0, time.Local),
				Error: "key \"/calico/resources/v3/projectcalico.org/clusterinformations/default\": context deadline exceeded"},
			Peers: []status.PeerStatus{{Address: "198.18.0.12", Type: status.PeerTypeMesh, State: "up", Since: "09:00:00", Info: "Established"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			srv, err := status.Listen(filepath.Join(dir, status.SocketName), func(context.Context) (status.Report, error) { return tc.rep, nil }, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			r := runCtl(t, "", nil, "node", "status", "--run-dir", dir)
			if r.code != 0 {
				t.Fatalf("node status: exit %d: %s", r.code, r.stderr)
			}
			golden(t, tc.name, r.stdout)
		})
	}
}

func TestNodeStatusNotRunning(t *testing.T) {
	dir := t.TempDir()
	// A pid file of a dead process is no running agent.
	if err := os.WriteFile(filepath.Join(dir, status.PIDFileName), []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCtl(t, "", nil, "node", "status", "--run-dir", dir)
	if r.code != 1 || r.stdout != "Calico process is not running.\n" {
		t.Errorf("node status with no agent: exit %d, stdout %q, stderr %q; want exit 1 and \"Calico process is not running.\"", r.code, r.stdout, r.stderr)
	}
}

func TestNodeRunDryrun(t *testing.T) {
	dir := t.TempDir()
	r := runCtl(t, "", []string{"ETCD_ENDPOINTS=http://198.18.0.1:2379"}, "node", "run", "--dryrun", "--run-dir", dir,
		"--name", "node-x", "--ip", "198.18.0.9/24", "--as", "64600", "--backend", "gobgp",
		"--ip-autodetection-method", "interface=eth0", "--no-default-ippools", "--log-dir", filepath.Join(dir, "log"),
		"--node-binary", calicoNode(t))
	if r.code != 0 {
		t.Fatalf("node run --dryrun: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"AS=64600", "CALICO_NETWORKING_BACKEND=gobgp", "IP=198.18.0.9/24", "IP_AUTODETECTION_METHOD=interface=eth0",
		"NODENAME=node-x", "NO_DEFAULT_POOLS=true", "ETCD_ENDPOINTS=http://198.18.0.1:2379",
		"Command: " + calicoNode(t), "logging to " + filepath.Join(dir, "log", "calico-node.log"),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dryrun output lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, status.PIDFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dryrun left a pid file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dryrun made the log directory: %v", err)
	}
	if r := runCtl(t, "", nil, "node", "run", "--dryrun", "--backend", "calico"); r.code == 0 || !strings.Contains(r.stderr, `invalid --backend "calico"`) {
		t.Errorf("bad backend: exit %d, stderr %q", r.code, r.stderr)
	}
}

// lab is two node namespaces joined by a veth pair: 198.18.0.1/24 and
// 198.18.0.2/24.
type lab struct{ ns [2]string }

func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "plnode-" + hex.EncodeToString(b) + "-"
	l := &lab{ns: [2]string{prefix + "a", prefix + "b"}}
	for _, ns := range l.ns {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	sh(t, "ip", "-n", l.ns[0], "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", l.ns[1])
	for i, ns := range l.ns {
		sh(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("198.18.0.%d/24", i+1), "dev", "eth0")
		sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	}
	return l
}

func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// nodeDirs are one node's state directories, all in the test's temp dir.
type nodeDirs struct{ run, log, etcd, nodename string }

func newNodeDirs(t *testing.T) nodeDirs {
	d := t.TempDir()
	nd := nodeDirs{filepath.Join(d, "run"), filepath.Join(d, "log"), filepath.Join(d, "etcd"), filepath.Join(d, "nodename")}
	// Whatever happens, the agent this test started is stopped.
	t.Cleanup(func() {
		if pid := status.RunningPID(filepath.Join(nd.run, status.PIDFileName)); pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return nd
}

func (nd nodeDirs) env(extra ...string) []string {
	return append([]string{"CALICO_RUN_DIR=" + nd.run, "CALICO_ETCD_DATA_DIR=" + nd.etcd, "CALICO_NODENAME_FILE=" + nd.nodename}, extra...)
}

// TestNodeRunLifecycle starts the real calico-node through `calicoctl node
// run` in one namespace (serving the embedded etcd), reaches that etcd from
// a second namespace with calicoctl and a second calico-node, checks
// status, refusal of a second run, diags, and stop.
func TestNodeRunLifecycle(t *testing.T) {
	l := newLab(t)
	bin := calicoNode(t)
	a, b := newNodeDirs(t), newNodeDirs(t)

	r := runCtl(t, l.ns[0], a.env(), "node", "run", "--name", "node-a", "--node-binary", bin, "--log-dir", a.log, "--backend", "bird")
	if r.code != 0 {
		log, _ := os.ReadFile(filepath.Join(a.log, "calico-node.log"))
		t.Fatalf("node run: exit %d\nstdout: %s\nstderr: %s\nlog: %s", r.code, r.stdout, r.stderr, log)
	}
	if !strings.Contains(r.stdout, `Calico node "node-a" started successfully.`) {
		t.Errorf("node run output: %q", r.stdout)
	}
	if got, _ := os.ReadFile(a.nodename); string(got) != "node-a" {
		t.Errorf("nodename file = %q, want node-a", got)
	}
	r = runCtl(t, l.ns[0], a.env(), "node", "status")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Calico process is running.\n") || !strings.Contains(r.stdout, "IPv4 BGP status\n") {
		t.Errorf("node status while running: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The bird backend runs the embedded GoBGP, whose API the gobgp CLI reads.
	if _, err := exec.LookPath("gobgp"); err == nil {
		if out, err := exec.Command("ip", "netns", "exec", l.ns[0], "gobgp", "-u", "127.0.0.1", "-p", "50051", "global").CombinedOutput(); err != nil {
			t.Errorf("gobgp global against node-a: %v\n%s", err, out)
		}
	}
	r = runCtl(t, l.ns[0], a.env(), "node", "run", "--name", "node-a", "--node-binary", bin, "--log-dir", a.log)
	if r.code != 1 || !strings.Contains(r.stderr, "calico-node is already running on this host") {
		t.Errorf("second node run: exit %d, stderr %q; want a clear refusal", r.code, r.stderr)
	}

	// The embedded etcd serves the other namespace on node-a's address,
	// over TLS to those who hold its join file.
	join := filepath.Join(a.etcd, "join.cfg")
	r = runCtl(t, l.ns[1], b.env(), "node", "run", "--config", join, "--name", "node-b", "--node-binary", bin, "--log-dir", b.log, "--backend", "bird")
	if r.code != 0 {
		log, _ := os.ReadFile(filepath.Join(b.log, "calico-node.log"))
		t.Fatalf("node run (node-b): exit %d\nstdout: %s\nstderr: %s\nlog: %s", r.code, r.stdout, r.stderr, log)
	}
	// The two nodes mesh: node-a's status shows the session to node-b up,
	// in Calico's table.
	meshRow := regexp.MustCompile(`\| 198\.18\.0\.2 +\| node-to-node mesh \| up +\| \d\d:\d\d:\d\d \| Established \|`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = runCtl(t, l.ns[0], a.env(), "node", "status")
		if meshRow.MatchString(r.stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-a never showed an established mesh session to node-b:\n%s%s", r.stdout, r.stderr)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(r.stdout, "IPv6 BGP status\nNo IPv6 peers found.\n") {
		t.Errorf("node status lacks the IPv6 section:\n%s", r.stdout)
	}
	r = runCtl(t, l.ns[1], nil, "--config", join, "get", "nodes", "-o", "wide")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`node-a\s+\S+\s+198\.18\.0\.1/24`),
		regexp.MustCompile(`node-b\s+\S+\s+198\.18\.0\.2/24`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("calicoctl get nodes from the other namespace lacks %s:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	r = runCtl(t, l.ns[0], nil, "--config", join, "get", "ippools")
	if !strings.Contains(r.stdout, "default-ipv4-ippool   192.168.0.0/16") {
		t.Errorf("default pool missing on the node's etcd:\n%s%s", r.stdout, r.stderr)
	}
	// Without the join file's certificate the embedded etcd is closed.
	r = runCtl(t, l.ns[1], []string{"ETCD_ENDPOINTS=https://198.18.0.1:2379"}, "get", "ippools")
	if r.code == 0 || strings.Contains(r.stdout, "default-ipv4-ippool") {
		t.Errorf("calicoctl without the join file read the embedded etcd: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Diags from node-a.
	out := t.TempDir()
	r = runCtl(t, l.ns[0], a.env(), "--config", join, "node", "diags", "--log-dir", a.log, "--output-dir", out, "--nodename-file", a.nodename)
	m := regexp.MustCompile(`Diags saved to (\S+\.tar\.gz)`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("node diags: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	files := readTarball(t, m[1])
	for name, want := range map[string]string{
		"ip-route.txt":             "198.18.0.0/24 dev eth0",
		"ip-addr.txt":              "inet 198.18.0.1/24",
		"node.yaml":                "ipv4Address: 198.18.0.1/24",
		"bgp-peers.txt":            "Calico process is running.",
		"logs/calico-node.log":     "calico-node is running",
		"iptables-save-nft.txt":    "",
		"ipset-list.txt":           "",
		"ip6-route.txt":            "",
		"iptables-save-legacy.txt": "",
	} {
		got, ok := files[name]
		if !ok {
			t.Errorf("diags tarball lacks %s (has %v)", name, keys(files))
			continue
		}
		if !strings.Contains(got, want) {
			t.Errorf("diags %s lacks %q:\n%s", name, want, got)
		}
	}

	// Stop node-a: SIGTERM ends it cleanly, and status says so.
	pid := status.RunningPID(filepath.Join(a.run, status.PIDFileName))
	if pid == 0 {
		t.Fatal("no running pid for node-a")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for status.Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if status.Alive(pid) {
		t.Fatalf("calico-node (pid %d) still alive 15 s after SIGTERM", pid)
	}
	r = runCtl(t, l.ns[0], a.env(), "node", "status")
	if r.code != 1 || r.stdout != "Calico process is not running.\n" {
		t.Errorf("node status after stop: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, f := range []string{status.PIDFileName, status.SocketName} {
		if _, err := os.Stat(filepath.Join(a.run, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after SIGTERM: %v", f, err)
		}
	}
	// A killed agent (-9) leaves its files; status still says not running.
	pidB := status.RunningPID(filepath.Join(b.run, status.PIDFileName))
	_ = syscall.Kill(pidB, syscall.SIGKILL)
	for status.Alive(pidB) {
		time.Sleep(20 * time.Millisecond)
	}
	r = runCtl(t, l.ns[1], b.env(), "node", "status")
	if r.code != 1 || r.stdout != "Calico process is not running.\n" {
		t.Errorf("node status after kill -9: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func readTarball(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(tr)
		_, name, _ := strings.Cut(h.Name, "/")
		out[name] = string(b)
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestNodeCheckSystem compares checksystem's verdicts with what this
// kernel really does, found out in the test's own namespace.
func TestNodeCheckSystem(t *testing.T) {
	l := newLab(t)
	r := runCtl(t, "", nil, "node", "checksystem")
	for _, kind := range []string{"veth", "vxlan", "ipip"} {
		args := map[string][]string{"veth": {"type", "veth", "peer", "name", "tp0"}, "vxlan": {"type", "vxlan", "id", "7", "dstport", "4789"}, "ipip": {"type", "ipip"}}[kind]
		err := exec.Command("ip", append([]string{"-n", l.ns[0], "link", "add", "t-" + kind}, args...)...).Run()
		want := "OK"
		if err != nil {
			want = map[bool]string{true: "FAIL", false: "WARN"}[kind == "veth"]
		}
		if got := verdict(r.stdout, "link type "+kind); got != want {
			t.Errorf("link type %s: checksystem says %s, the kernel says %s", kind, got, want)
		}
	}
	if got := verdict(r.stdout, "kernel version"); got != "OK" {
		t.Errorf("kernel version verdict %s", got)
	}
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if want := map[bool]string{true: "OK", false: "WARN"}[strings.TrimSpace(string(fwd)) == "1"]; verdict(r.stdout, "net.ipv4.ip_forward") != want {
		t.Errorf("ip_forward verdict %s, want %s", verdict(r.stdout, "net.ipv4.ip_forward"), want)
	}
	failed := strings.Contains(r.stdout, " FAIL ")
	if failed != (r.code != 0) {
		t.Errorf("exit code %d does not match the FAIL lines:\n%s", r.code, r.stdout)
	}
	if !failed && !strings.Contains(r.stdout, "System meets minimum system requirements") {
		t.Errorf("no summary line:\n%s", r.stdout)
	}
	// The scratch namespace is gone afterwards.
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "calicoctl-check-") {
		t.Errorf("checksystem left its namespace: %s", out)
	}
}

// verdict returns the verdict column of the line starting with name.
func verdict(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, name+" ") {
			f := strings.Fields(strings.TrimPrefix(line, name))
			if len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}
