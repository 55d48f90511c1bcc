package commands_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/felix/calc/benchdata"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// BenchmarkExplain10kPolicies250kEndpoints times one `calicoctl policy
// explain` (process start, the reads, the explanation, the output)
// between two pods of a cluster of 10,000 policies and 250,000
// WorkloadEndpoints in etcd, named by pod and by address (found through
// IPAM), each pod selected by ~650 policies. The reference, measured in
// the same run, is one raw read of the whole resource prefix (every
// value, undecoded): x/ref (by pod; by address in s-by-address) below 1
// means explain reads less than the cluster. The goal is 1 s end to end.
func BenchmarkExplain10kPolicies250kEndpoints(b *testing.B) {
	c := newCluster(b)
	ctx := context.Background()
	began := time.Now()
	if err := benchdata.Write(ctx, c.raw, benchdata.Cluster(250_000, 10_000, func(i int) string { return fmt.Sprintf("node-%d", i%100) })); err != nil {
		b.Fatal(err)
	}
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: c.endpoints})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	alloc := ipam.New(store, store.KV())
	for _, i := range []int{0, 1} {
		if err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: benchdata.Addr(i), HandleID: fmt.Sprintf("k8s-pod-network.%d", i),
			Attrs: map[string]string{"namespace": benchdata.Namespace(i), "pod": benchdata.Pod(i), "node": fmt.Sprintf("node-%d", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("cluster written in %s", time.Since(began).Round(time.Second))
	byPod := []string{"policy", "explain", "--from", benchdata.Namespace(0) + "/" + benchdata.Pod(0), "--to", benchdata.Namespace(1) + "/" + benchdata.Pod(1), "--port", "80"}
	byAddr := []string{"policy", "explain", "--from", benchdata.Addr(0).String(), "--to", benchdata.Addr(1).String(), "--port", "80"}
	// The cluster is written once; only the sub-benchmark is run b.N times.
	b.Run("explain", func(b *testing.B) {
		var podTime, addrTime, refTime time.Duration
		for range b.N {
			for _, run := range []struct {
				args []string
				into *time.Duration
			}{{byPod, &podTime}, {byAddr, &addrTime}} {
				start := time.Now()
				r := c.run(b, "", nil, run.args...)
				*run.into += time.Since(start)
				if r.code != 0 || !containsLine(r.stdout, "Verdict: Allow") {
					b.Fatalf("explain: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			}
			b.StopTimer()
			start := time.Now()
			resp, err := c.raw.Get(ctx, datastore.ResourcePrefix, clientv3.WithPrefix())
			refTime += time.Since(start)
			if err != nil || len(resp.Kvs) < 260_000 {
				b.Fatalf("raw read: %v", err)
			}
			b.StartTimer()
		}
		n := float64(b.N)
		b.ReportMetric(podTime.Seconds()/n, "s-by-pod")
		b.ReportMetric(addrTime.Seconds()/n, "s-by-address")
		b.ReportMetric(refTime.Seconds()/n, "s-raw-read")
		b.ReportMetric(float64(podTime)/float64(refTime), "x/ref")
	})
}

func containsLine(s, line string) bool { return strings.Contains("\n"+s, "\n"+line+"\n") }
