package etcdv3_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// BenchmarkList10000 lists 10,000 NetworkSets and compares the time with
// a raw prefix Get of the same keys (the same bytes, undecoded), measured
// in the same run: the x/ref metric is List time over raw Get time.
func BenchmarkList10000(b *testing.B) {
	const count, batch = 10000, 100
	s := connect(b, etcdtest.Start(b))
	ctx := testCtx(b)
	codec := datastore.NewCodec()
	created := v3.NewTime(time.Now())
	for start := 0; start < count; start += batch {
		var ops []clientv3.Op
		for i := start; i < start+batch; i++ {
			ns := netset(fmt.Sprintf("ns-%02d", i%20), fmt.Sprintf("set-%05d", i),
				fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256), fmt.Sprintf("fd00:%x::/64", i))
			ns.Labels = map[string]string{"app": "bench", "index": fmt.Sprint(i)}
			val, _, err := codec.Encode(ns, uuid.NewString(), created)
			if err != nil {
				b.Fatal(err)
			}
			path, err := datastore.KeyPath(datastore.KeyOf(ns))
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(path, string(val)))
		}
		if _, err := s.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatalf("preparing network sets: %v", err)
		}
	}
	prefix := datastore.ResourcePrefix + "networksets/"

	var listTime, refTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		items, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkSet})
		listTime += time.Since(t0)
		if err != nil || len(items) != count {
			b.Fatalf("List: %d items, %v", len(items), err)
		}

		b.StopTimer()
		t0 = time.Now()
		resp, err := s.Client().Get(ctx, prefix, clientv3.WithPrefix())
		refTime += time.Since(t0)
		if err != nil || len(resp.Kvs) != count {
			b.Fatalf("raw Get: %v", err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(listTime)/float64(refTime), "x/ref")
}
