package etcdv3_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestLargeList reads back more than 4 MiB under one prefix, beyond
// gRPC's default message size, with both clients and both etcds.
func TestLargeList(t *testing.T) {
	const count, size = 48, 100 << 10
	for _, srv := range []struct {
		name  string
		start func(testing.TB) []string
	}{{"embedded", etcdtest.Start}, {"external", etcdtest.StartExternal}} {
		t.Run(srv.name, func(t *testing.T) {
			endpoints := srv.start(t)
			raw := connect(t, endpoints)
			ctx := testCtx(t)
			const prefix = "/calico/ipam/v2/large/"
			for i := range count {
				val := bytes.Repeat([]byte{byte('a' + i%26)}, size)
				if _, err := raw.KV().Create(ctx, datastore.KVPair{Key: fmt.Sprintf("%s%03d", prefix, i), Value: val}); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range clients() {
				t.Run(c.name, func(t *testing.T) {
					list, _, err := connectWith(t, c, endpoints).KV().List(ctx, prefix)
					if err != nil {
						t.Fatalf("listing %d MiB: %v", count*size>>20, err)
					}
					if len(list) != count {
						t.Fatalf("listed %d keys, want %d", len(list), count)
					}
					for i, p := range list {
						if len(p.Value) != size || p.Value[0] != byte('a'+i%26) {
							t.Fatalf("%s: %d bytes starting %q", p.Key, len(p.Value), p.Value[:1])
						}
					}
				})
			}
		})
	}
}
