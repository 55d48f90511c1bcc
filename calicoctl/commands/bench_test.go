package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// BenchmarkApply1000 times `calicoctl apply -f` of 1,000 GlobalNetworkSets
// (process start-up, decoding, validation, one read of the kind, the
// writes) against an embedded etcd, and reports it as a ratio to writing
// the same values with 1,000 plain clientv3 puts from this process, in the
// same run. The store is emptied before each round so every round creates.
func BenchmarkApply1000(b *testing.B) {
	c := newCluster(b)
	var doc strings.Builder
	values := make(map[string][]byte, 1000)
	for i := range 1000 {
		name := fmt.Sprintf("set-%04d", i)
		cidr := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
		fmt.Fprintf(&doc, "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: %s\n  labels:\n    role: bench\nspec:\n  nets:\n  - %s\n", name, cidr)
		r := &v3.GlobalNetworkSet{
			TypeMeta:   v3.TypeMeta{Kind: v3.KindGlobalNetworkSet, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: name, Labels: map[string]string{"role": "bench"}},
			Spec:       v3.GlobalNetworkSetSpec{Nets: []string{cidr}},
		}
		val, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		path, err := datastore.KeyPath(datastore.KeyOf(r))
		if err != nil {
			b.Fatal(err)
		}
		values[path] = val
	}
	file := filepath.Join(b.TempDir(), "sets.yaml")
	if err := os.WriteFile(file, []byte(doc.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	wipe := func() {
		if _, err := c.raw.Delete(ctx, datastore.ResourcePrefix, clientv3.WithPrefix()); err != nil {
			b.Fatal(err)
		}
	}

	var applyTotal, refTotal time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		wipe()
		start := time.Now()
		for path, val := range values {
			if _, err := c.raw.Put(ctx, path, string(val)); err != nil {
				b.Fatal(err)
			}
		}
		refTotal += time.Since(start)
		wipe()
		b.StartTimer()

		start = time.Now()
		r := c.run(b, "", nil, "apply", "-f", file)
		applyTotal += time.Since(start)
		if r.code != 0 || r.stdout != "Successfully applied 1000 'GlobalNetworkSet' resource(s)\n" {
			b.Fatalf("apply: exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(applyTotal)/float64(refTotal), "x/ref")
}
