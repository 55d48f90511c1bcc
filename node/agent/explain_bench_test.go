package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/calc/benchdata"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/node/status"
)

// BenchmarkExplainLiveNode times one explanation asked of a running
// felix over the status socket (the request, the live graph's answer and
// the dataplane's counters of the rules tried) on a node whose datastore
// holds 10,000 policies and 250,000 endpoints, two of them local, each
// selected by ~650 policies. The reference, measured in the same run, is
// one `iptables-nft-save -c` of the node's filter table: the read of the
// counters any such answer includes. The goal is 50 ms.
func BenchmarkExplainLiveNode(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for a network namespace")
	}
	r := make([]byte, 4)
	_, _ = rand.Read(r)
	ns := "plnode-" + hex.EncodeToString(r) + "-x"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	nsPath := "/run/netns/" + ns

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := etcdtest.NewStore(b, etcdtest.Start(b))
	const node = "bench-node"
	began := time.Now()
	if err := benchdata.Write(ctx, store.Client(), benchdata.Cluster(250_000, 10_000, func(i int) string {
		if i < 2 {
			return node
		}
		return fmt.Sprintf("node-%d", i%100)
	})); err != nil {
		b.Fatal(err)
	}
	b.Logf("cluster written in %s", time.Since(began).Round(time.Second))
	in := felix.NewInspector()
	programmed := make(chan struct{}, 1)
	// felix's logger follows logSeverityScreen (Info by default): discard
	// it, and quiet the standard logger the syncer writes to.
	logger := log.New()
	logger.SetOutput(io.Discard)
	level := log.GetLevel()
	log.SetLevel(log.WarnLevel)
	b.Cleanup(func() { log.SetLevel(level) })
	done := make(chan error, 1)
	go func() {
		done <- felix.Run(ctx, felix.Config{NodeName: node, Store: store, NetNS: nsPath, Log: log.NewEntry(logger), Inspector: in,
			Applied: func() {
				select {
				case programmed <- struct{}{}:
				default:
				}
			}})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-programmed:
	case err := <-done:
		b.Fatalf("felix: %v", err)
	case <-time.After(10 * time.Minute):
		b.Fatal("felix did not program the node")
	}
	b.Logf("felix in sync and programmed %s after the start", time.Since(began).Round(time.Second))
	sock := filepath.Join(b.TempDir(), status.SocketName)
	srv, err := status.Listen(sock, func(context.Context) (status.Report, error) { return status.Report{NodeName: node}, nil },
		livePolicy{inspector: in, store: store})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	run, err := nsexec.New(nsPath)
	if err != nil {
		b.Fatal(err)
	}
	defer run.Close()

	q := calc.Query{From: calc.End{Namespace: benchdata.Namespace(0), Name: benchdata.Pod(0)},
		To: calc.End{Namespace: benchdata.Namespace(1), Name: benchdata.Pod(1)}, Protocol: 6, SrcPort: 32768, DstPort: 80}
	// The cluster is written and programmed once; only the sub-benchmark
	// is run b.N times.
	b.Run("explain", func(b *testing.B) {
		var explainTime, refTime time.Duration
		for range b.N {
			start := time.Now()
			x, err := status.Explain(ctx, sock, q)
			explainTime += time.Since(start)
			if err != nil || x.Verdict != calc.VerdictAllow {
				b.Fatalf("explain: %v %+v", err, x)
			}
			b.StopTimer()
			if x.Sides[1].Decider.Rule == nil {
				b.Fatalf("no deciding rule: %+v", x.Sides[1])
			}
			start = time.Now()
			if _, err := run.Run(ctx, "", "iptables-nft-save", "-c", "-t", "filter"); err != nil {
				b.Fatal(err)
			}
			refTime += time.Since(start)
			b.StartTimer()
		}
		n := float64(b.N)
		b.ReportMetric(explainTime.Seconds()*1000/n, "ms")
		b.ReportMetric(refTime.Seconds()*1000/n, "ms-counters-read")
		b.ReportMetric(float64(explainTime)/float64(refTime), "x/ref")
	})
}
