package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/node/status"
)

// rssGoal is the idle resident memory calico-node should stay under.
const rssGoal = 60 << 20

// BenchmarkIdleRSS starts the real calico-node (bird backend: embedded
// GoBGP) in two test namespaces: one serving the embedded etcd, one using
// that etcd as a client only (the two peer over the mesh),
// lets them idle and reads their resident memory. No reference peer
// exists: x/ref is RSS (embedded etcd included) against the 60 MB goal.
func BenchmarkIdleRSS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	bin := filepath.Join(os.Getenv("PALISADE_BIN"), "calico-node")
	if os.Getenv("PALISADE_BIN") == "" {
		bin = filepath.Join(b.TempDir(), "calico-node")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/calico-node").CombinedOutput(); err != nil {
			b.Fatalf("building calico-node: %v\n%s", err, out)
		}
	}
	r := make([]byte, 4)
	_, _ = rand.Read(r)
	// Two node namespaces joined by a veth pair, 198.18.0.1 and .2.
	nss := [2]string{"plnode-" + hex.EncodeToString(r) + "-a", "plnode-" + hex.EncodeToString(r) + "-b"}
	for _, ns := range nss {
		mustRun(b, "ip", "netns", "add", ns)
		b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		mustRun(b, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	mustRun(b, "ip", "-n", nss[0], "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", nss[1])
	for i, ns := range nss {
		mustRun(b, "ip", "-n", ns, "addr", "add", "198.18.0."+strconv.Itoa(i+1)+"/24", "dev", "eth0")
		mustRun(b, "ip", "-n", ns, "link", "set", "eth0", "up")
	}

	start := func(ns, name, dir string, args ...string) int {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin, "--log-level", "warning"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NODENAME=" + name,
			"CALICO_RUN_DIR=" + filepath.Join(dir, "run"), "CALICO_ETCD_DATA_DIR=" + filepath.Join(dir, "etcd"),
			"CALICO_NODENAME_FILE=" + filepath.Join(dir, "nodename")}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		sock := filepath.Join(dir, "run", status.SocketName)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rep, err := status.Fetch(ctx, sock)
			cancel()
			if err == nil {
				return rep.PID
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.Fatalf("calico-node %s did not come up", name)
		return 0
	}
	var withEtcd, without float64
	for i := 0; i < b.N; i++ {
		da, db := b.TempDir(), b.TempDir()
		pa := start(nss[0], "node-a", da)
		// node-b joins node-a's embedded etcd with the join file it wrote.
		pb := start(nss[1], "node-b", db, "--config", filepath.Join(da, "etcd", "join.cfg"))
		time.Sleep(3 * time.Second) // idle
		withEtcd, without = rss(b, pa), rss(b, pb)
	}
	b.ReportMetric(withEtcd/(1<<20), "MB-embedded-etcd")
	b.ReportMetric(without/(1<<20), "MB-etcd-client")
	b.ReportMetric(withEtcd/rssGoal, "x/ref")
	b.ReportMetric(without/rssGoal, "client-x/ref")
}

func rss(b *testing.B, pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

func mustRun(b *testing.B, name string, args ...string) {
	b.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
