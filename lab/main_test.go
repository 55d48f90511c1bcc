package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// binDir holds the binaries the labs run; testRoot the tests' labs.
var binDir, testRoot string

func TestMain(m *testing.M) {
	// Labs started by this test binary run calico-node under it.
	MaybeSupervise()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", besideParallel); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	root, err := os.MkdirTemp("", "pl-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(root)
	testRoot = root
	if dir := os.Getenv("PALISADE_BIN"); dir != "" {
		binDir = dir
		return m.Run()
	}
	if os.Geteuid() != 0 {
		return m.Run() // every lab test skips
	}
	binDir = filepath.Join(root, "bin")
	for name, pkg := range map[string]string{"calico-node": "../node/cmd/calico-node", "calicoctl": "../calicoctl/cmd/calicoctl",
		"calico": "../cni-plugin/cmd/calico", "calico-ipam": "../cni-plugin/cmd/calico-ipam", "lab": "./cmd/lab"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", name, err, out)
			return 1
		}
	}
	return m.Run()
}

// requireLab skips a test that cannot build a lab here.
func requireLab(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces")
	}
	for _, f := range []string{bird2Bin, etcdBin} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s is not installed (make deps)", f)
		}
	}
}

// beside lets a test run beside other such tests once the package's
// serial tests are done (t.Parallel), in one of two lanes, one test at a
// time in each: realNodesLane for TestRealNodes alone (five to six
// minutes: kubelet, containerd), so that it starts first; otherLane for
// the rest. The lanes are what decides which tests overlap: go test's own
// limit (-parallel) is raised in runTests so that it never holds a lab
// test back and the real nodes start at once, not after whatever go test
// would have started first. The lab package is the longest of make test,
// and most of a lab test is waiting: for kubelet and containerd, BGP,
// convergence. Each lab has namespaces, cgroups, state and addresses of
// its own (its unique prefix), so two labs do not see each other. Only
// for a test whose lab never runs felix's eBPF dataplane (its
// connect-time load balancer attaches to the host's root cgroup, which
// every lab shares) and that does not time the machine itself (the etcd
// outages' recovery bounds, the agent restarts', the benchmarks): those
// stay serial, and the serial tests all finish before any of these
// starts.
func beside(t *testing.T, lane *sync.Mutex) {
	t.Helper()
	t.Parallel()
	lane.Lock()
	t.Cleanup(lane.Unlock) // registered first: runs after the lab is down
}

// The lanes of beside.
var realNodesLane, otherLane sync.Mutex

// besideParallel is -parallel for the lab tests unless given: more than
// the tests that call beside, whose lanes then decide what overlaps.
const besideParallel = "32"

// logWriter sends progress lines to the test log.
type logWriter struct {
	t  testing.TB
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newLab brings a lab up with a unique name (o.Name, "t" by default, and
// random hex: a prefix of its own lets a test's leftovers be told from
// another worktree's) and removes it when the test ends, showing the
// agents' logs first if it failed.
func newLab(t testing.TB, o Options) *Lab {
	t.Helper()
	return newLabTimeout(t, o, 2*time.Minute)
}

// newLabTimeout is newLab with a timeout of its own for Up.
func newLabTimeout(t testing.TB, o Options, timeout time.Duration) *Lab {
	t.Helper()
	requireLab(t)
	if o.Name == "" {
		o.Name = "t"
	}
	o.Name = uniqueName(o.Name)
	o.BinDir, o.StateRoot = binDir, testRoot
	if testing.Verbose() {
		o.Progress = &logWriter{t: t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := Up(ctx, o)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range l.Nodes() {
				t.Logf("--- %s calico-node log (tail):\n%s", n.Name, tail(l.nodeDir(n.Name, "calico-node.log"), 3000))
			}
		}
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
		if ents, _ := os.ReadDir(netnsDir); len(ents) > 0 {
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), l.Prefix()) {
					t.Errorf("namespace %s left behind", e.Name())
				}
			}
		}
		if _, err := os.Stat(l.Dir()); err == nil {
			t.Errorf("state directory %s left behind", l.Dir())
		}
	})
	return l
}

// addPods adds per pods to every node, named p<node index><letter>.
func addPods(t testing.TB, l *Lab, namespace string, per int) []Pod {
	t.Helper()
	var pods []Pod
	for _, n := range l.Nodes() {
		for i := 0; i < per; i++ {
			p, err := l.AddPod(context.Background(), n.Name, namespace, fmt.Sprintf("p%d%c", n.Index, 'a'+i))
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
		}
	}
	return pods
}

// requireReachable waits for every pod to reach every other one.
func requireReachable(t testing.TB, l *Lab, why string) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.WaitPodRoutes(ctx, 30*time.Second); err != nil {
		t.Fatalf("%s: %v", why, err)
	}
	m, err := l.WaitReachable(ctx, 20*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", why, err)
	}
	var b bytes.Buffer
	m.Print(&b)
	t.Logf("%s:\n%s", why, b.String())
}

// uniqueName is prefix and six random hex digits: a lab (and its
// namespaces, pl-<name>-…) no other test run on this machine shares.
func uniqueName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
