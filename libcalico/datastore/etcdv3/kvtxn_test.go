package etcdv3_test

import (
	"errors"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestKVTxn checks the multi-key compare-and-swap against the embedded
// etcd and the system one, with both clients: every condition kind
// holding and failing, that a failed transaction writes nothing, and that
// it reads the conditions' keys back.
func TestKVTxn(t *testing.T) {
	for _, c := range clients() {
		t.Run("embedded/"+c.name, func(t *testing.T) { testKVTxn(t, connectWith(t, c, etcdtest.Start(t))) })
		t.Run("external/"+c.name, func(t *testing.T) { testKVTxn(t, connectWith(t, c, etcdtest.StartExternal(t))) })
	}
}

func testKVTxn(t *testing.T, s store) {
	kv := s.KV()
	ctx := testCtx(t)
	a, err := kv.Create(ctx, datastore.KVPair{Key: "/t/a", Value: []byte("a1")})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := kv.Create(ctx, datastore.KVPair{Key: "/t/p/1", Value: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	base := p1.Revision

	cases := []struct {
		name    string
		conds   []datastore.KVCond
		wantOK  bool
		current []datastore.KVPair // on failure
	}{
		{"key at its revision", []datastore.KVCond{{Key: "/t/a", Revision: a.Revision}}, true, nil},
		{"stale key revision", []datastore.KVCond{{Key: "/t/a", Revision: a.Revision - 1}}, false,
			[]datastore.KVPair{{Key: "/t/a", Value: []byte("a1"), Revision: a.Revision}}},
		{"absent key required absent", []datastore.KVCond{{Key: "/t/none", Revision: 0}}, true, nil},
		{"present key required absent", []datastore.KVCond{{Key: "/t/a", Revision: 0}, {Key: "/t/none"}}, false,
			[]datastore.KVPair{{Key: "/t/a", Value: []byte("a1"), Revision: a.Revision}, {Key: "/t/none"}}},
		{"prefix unchanged", []datastore.KVCond{{Key: "/t/p/", Prefix: true, Revision: base}}, true, nil},
		{"prefix changed since", []datastore.KVCond{{Key: "/t/p/", Prefix: true, Revision: base - 1}}, false, []datastore.KVPair{}},
		{"empty prefix", []datastore.KVCond{{Key: "/t/q/", Prefix: true, Revision: 1}}, true, nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := []byte{byte('0' + i)}
			before, _ := kv.Get(ctx, "/t/out")
			rev, current, err := kv.Txn(ctx, tc.conds, []datastore.KVOp{{Key: "/t/out", Value: out}})
			after, gerr := kv.Get(ctx, "/t/out")
			if tc.wantOK {
				if err != nil || rev == 0 {
					t.Fatalf("Txn: rev %d, err %v; want success", rev, err)
				}
				if gerr != nil || string(after.Value) != string(out) || after.Revision != rev {
					t.Fatalf("after success /t/out = %q at %d (%v), want %q at %d", after.Value, after.Revision, gerr, out, rev)
				}
				return
			}
			if !errors.Is(err, datastore.ErrConflict) {
				t.Fatalf("Txn error %v, want a conflict", err)
			}
			if after.Revision != before.Revision {
				t.Fatalf("failed transaction wrote /t/out (revision %d → %d)", before.Revision, after.Revision)
			}
			if len(current) != len(tc.current) {
				t.Fatalf("current %v, want %v", current, tc.current)
			}
			for j, c := range tc.current {
				if current[j].Key != c.Key || string(current[j].Value) != string(c.Value) || current[j].Revision != c.Revision {
					t.Errorf("current[%d] = %s %q @%d, want %s %q @%d", j, current[j].Key, current[j].Value, current[j].Revision, c.Key, c.Value, c.Revision)
				}
			}
		})
	}

	t.Run("puts and deletes together", func(t *testing.T) {
		cur, err := kv.Get(ctx, "/t/a")
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = kv.Txn(ctx, []datastore.KVCond{{Key: "/t/a", Revision: cur.Revision}, {Key: "/t/b"}},
			[]datastore.KVOp{{Key: "/t/a", Delete: true}, {Key: "/t/b", Value: []byte("b")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, "/t/a"); !errors.Is(err, datastore.ErrNotFound) {
			t.Errorf("/t/a after delete: %v", err)
		}
		if b, err := kv.Get(ctx, "/t/b"); err != nil || string(b.Value) != "b" {
			t.Errorf("/t/b = %q, %v", b.Value, err)
		}
	})
	t.Run("no writes", func(t *testing.T) {
		if _, _, err := kv.Txn(ctx, nil, nil); err == nil {
			t.Error("transaction with no writes succeeded")
		}
	})
}
