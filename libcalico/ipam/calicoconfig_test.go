package ipam

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// TestCalicoConfigRecord checks the IPAM configuration Calico keeps at
// /calico/ipam/v2/config: it applies when no IPAMConfiguration is stored,
// the resource wins over it, and SetConfig writes both, the record in
// Calico's JSON, so Calico nodes still running read the same settings.
func TestCalicoConfigRecord(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	kv := e.store.KV()
	if _, err := kv.Create(ctx, datastore.KVPair{Key: calicoConfigKey, Value: []byte(`{"strict_affinity":true,"auto_allocate_blocks":true,"maxBlocksPerHost":4}`)}); err != nil {
		t.Fatal(err)
	}
	want := Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 4}
	if got, err := e.alloc.GetConfig(ctx); err != nil || got != want {
		t.Fatalf("config from Calico's record: %+v %v, want %+v", got, err, want)
	}
	// Allocation follows it: with every block of the pool n's, m may not
	// borrow an address of them (strict affinity).
	e.pool("a", "10.0.0.0/24", nil)
	e.assign(AutoAssignArgs{Num4: 4 * 64, Hostname: "n"})
	_, _, err := e.alloc.AutoAssign(ctx, AutoAssignArgs{Num4: 1, Hostname: "m"})
	wantErrIs(t, err, ErrExhausted)

	set := Config{AutoAllocateBlocks: true, MaxBlocksPerHost: 2}
	if err := e.alloc.SetConfig(ctx, set); err != nil {
		t.Fatal(err)
	}
	if got, err := e.alloc.GetConfig(ctx); err != nil || got != set {
		t.Errorf("config after SetConfig %+v %v, want %+v", got, err, set)
	}
	p, err := kv.Get(ctx, calicoConfigKey)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(p.Value, &raw); err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"auto_allocate_blocks": true, "maxBlocksPerHost": float64(2)}; !reflect.DeepEqual(raw, want) {
		t.Errorf("Calico's record %s, want %v", p.Value, want)
	}
}
