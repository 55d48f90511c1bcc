package etcdv3_test

import (
	"fmt"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// testWriteBatch checks that a batch is written whole, keeps the identity
// it is given on updates, and writes nothing when any precondition fails.
func testWriteBatch(t *testing.T, s store, raw *etcdv3.Store) {
	ctx := testCtx(t)
	existing := mustCreate(t, s, netset("ns", "old", "10.0.0.0/24"))

	changed := netset("ns", "old", "10.0.9.0/24")
	changed.ObjectMeta = *existing.GetObjectMeta()
	writes := []datastore.BatchWrite{{Resource: changed}}
	for i := range 5 {
		writes = append(writes, datastore.BatchWrite{Resource: netset("ns", fmt.Sprintf("new-%d", i), "10.1.0.0/24"), Create: true})
	}
	out, err := s.WriteBatch(ctx, writes)
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	if len(out) != len(writes) {
		t.Fatalf("WriteBatch returned %d resources, want %d", len(out), len(writes))
	}
	for _, r := range out {
		checkStored(t, raw, r)
		got, err := s.Get(ctx, datastore.KeyOf(r))
		if err != nil {
			t.Fatal(err)
		}
		if got.GetObjectMeta().ResourceVersion != out[0].GetObjectMeta().ResourceVersion {
			t.Errorf("%s stored at %s, want the batch's revision %s", keyName(r), got.GetObjectMeta().ResourceVersion, out[0].GetObjectMeta().ResourceVersion)
		}
	}
	if got := out[0].GetObjectMeta(); got.UID != existing.GetObjectMeta().UID || !got.CreationTimestamp.Equal(existing.GetObjectMeta().CreationTimestamp.Time) {
		t.Errorf("update lost the stored identity: uid %q created %v", got.UID, got.CreationTimestamp)
	}
	if nets := out[0].(*v3.NetworkSet).Spec.Nets; len(nets) != 1 || nets[0] != "10.0.9.0/24" {
		t.Errorf("update not written: nets %v", nets)
	}

	// A stale update or a create of a taken key rejects the whole batch.
	for _, tc := range []struct {
		name string
		bad  datastore.BatchWrite
	}{
		{"stale resourceVersion", datastore.BatchWrite{Resource: changed}},
		{"create of a taken key", datastore.BatchWrite{Resource: netset("ns", "new-0", "10.2.0.0/24"), Create: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := netset("ns", "never-"+fmt.Sprint(len(tc.name)), "10.3.0.0/24")
			_, err := s.WriteBatch(ctx, []datastore.BatchWrite{{Resource: fresh, Create: true}, tc.bad})
			wantErr(t, "WriteBatch", err, datastore.ErrBatchRejected, "batch rejected: a resource changed since it was read (2 writes)")
			if _, err := s.Get(ctx, datastore.KeyOf(fresh)); err == nil {
				t.Fatalf("a rejected batch wrote %s", keyName(fresh))
			}
		})
	}

	if _, err := s.WriteBatch(ctx, []datastore.BatchWrite{{Resource: netset("ns", "x")}}); err == nil ||
		err.Error() != `networkset "x" in namespace "ns": a batched update needs metadata.resourceVersion` {
		t.Fatalf("update without resourceVersion: %v", err)
	}
	dup := netset("ns", "dup", "10.4.0.0/24")
	if _, err := s.WriteBatch(ctx, []datastore.BatchWrite{{Resource: dup, Create: true}, {Resource: dup, Create: true}}); err == nil ||
		err.Error() != `networkset "dup" in namespace "ns": named twice in one batch` {
		t.Fatalf("duplicate key: %v", err)
	}
}
