package ipam

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestIPCooldown: with IPAMConfiguration ipCooldownSeconds, a released
// address is not handed out again until the cooldown has passed. While it
// cools down it stays allocated in its block to an attribute with no
// handle and no owner that holds only its release time, as Calico's IPAM
// keeps it: no handle counts it, no query shows it as held, and it is
// neither free nor assignable.
func TestIPCooldown(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.node("n1", nil)
	// One block of 8 addresses, so a released address is the only one
	// that could be handed out again.
	e.pool("p", "10.61.0.0/29", func(s *v3.IPPoolSpec) { s.BlockSize = 29 })
	const cool = 2 * time.Second
	if err := e.alloc.SetConfig(ctx, Config{AutoAllocateBlocks: true, IPCooldown: cool}); err != nil {
		t.Fatal(err)
	}
	if c, err := e.alloc.GetConfig(ctx); err != nil || c.IPCooldown != cool {
		t.Fatalf("config read back: %+v, %v", c, err)
	}
	held := map[string]netip.Addr{}
	for i := range 8 {
		h := "h" + string(rune('0'+i))
		v4, _ := e.assign(AutoAssignArgs{Num4: 1, HandleID: h, Hostname: "n1", Attrs: map[string]string{"pod": h}})
		held[h] = v4[0].Addr()
	}
	released := held["h3"]
	if err := e.alloc.ReleaseByHandle(ctx, "h3"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// Cooling: not free, held by nobody.
	b := e.blocks()[netip.MustParsePrefix("10.61.0.0/29")]
	if len(b.Cooling) != 1 || b.Cooling[0] != released || b.Free != 0 || len(b.Allocations) != 7 {
		t.Fatalf("block after release: cooling %v, free %d, %d allocations; want cooling [%s], free 0, 7", b.Cooling, b.Free, len(b.Allocations), released)
	}
	if _, ok := e.handles()["h3"]; ok {
		t.Error("handle h3 still stored after its release")
	}
	if _, err := e.alloc.GetAssignmentAttributes(ctx, released); err == nil || !strings.Contains(err.Error(), "cooling down") {
		t.Errorf("attributes of a cooling address: %v, want not assigned, cooling down", err)
	}
	e.checkInvariants()

	// The stored attribute: only the release time, no handle, no owner.
	p, err := e.store.KV().Get(ctx, blockKey(netip.MustParsePrefix("10.61.0.0/29")))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Allocations []*int           `json:"allocations"`
		Unallocated []int            `json:"unallocated"`
		Attributes  []map[string]any `json:"attributes"`
	}
	if err := json.Unmarshal(p.Value, &raw); err != nil {
		t.Fatal(err)
	}
	o := int(released.As4()[3])
	if raw.Allocations[o] == nil || len(raw.Unallocated) != 0 {
		t.Fatalf("stored block: ordinal %d allocation %v, unallocated %v", o, raw.Allocations[o], raw.Unallocated)
	}
	at := raw.Attributes[*raw.Allocations[o]]
	ts, _ := at["released_at"].(string)
	if len(at) != 1 || ts == "" {
		t.Fatalf("stored attribute of the cooling address %v, want only released_at", at)
	}
	if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Fatalf("released_at %q: %v", ts, err)
	}

	// During the cooldown: not handed out, not assignable by address.
	if _, _, err := e.alloc.AutoAssign(ctx, AutoAssignArgs{Num4: 1, HandleID: "x", Hostname: "n1"}); err == nil {
		if time.Since(start) < cool {
			t.Fatal("an address was handed out while the only free one cools down")
		}
	}
	err = e.alloc.AssignIP(ctx, AssignIPArgs{IP: released, HandleID: "y", Hostname: "n1"})
	if time.Since(start) < cool {
		wantErrIs(t, err, ErrAlreadyAssigned)
		if !strings.Contains(err.Error(), "cooling down") {
			t.Errorf("assigning the cooling address: %v, want it to say it cools down", err)
		}
	}

	// After it: the released address is the one handed out.
	time.Sleep(time.Until(start.Add(cool + 100*time.Millisecond)))
	v4, _ := e.assign(AutoAssignArgs{Num4: 1, HandleID: "z", Hostname: "n1"})
	if v4[0].Addr() != released {
		t.Fatalf("after the cooldown got %s, want the released %s", v4[0].Addr(), released)
	}
	if b := e.blocks()[netip.MustParsePrefix("10.61.0.0/29")]; len(b.Cooling) != 0 {
		t.Errorf("still cooling after reuse: %v", b.Cooling)
	}
	e.checkInvariants()
}

// TestIPCooldownOff: without ipCooldownSeconds a released address is
// free at once, and no stored attribute carries a release time.
func TestIPCooldownOff(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.node("n1", nil)
	e.pool("p", "10.62.0.0/29", func(s *v3.IPPoolSpec) { s.BlockSize = 29 })
	for i := range 8 {
		e.assign(AutoAssignArgs{Num4: 1, HandleID: "h" + string(rune('0'+i)), Hostname: "n1"})
	}
	if err := e.alloc.ReleaseByHandle(ctx, "h5"); err != nil {
		t.Fatal(err)
	}
	v4, _ := e.assign(AutoAssignArgs{Num4: 1, HandleID: "again", Hostname: "n1"})
	if v4[0].Addr() != netip.MustParseAddr("10.62.0.5") {
		t.Fatalf("got %s, want the released 10.62.0.5 at once", v4[0].Addr())
	}
	p, err := e.store.KV().Get(context.Background(), blockKey(netip.MustParsePrefix("10.62.0.0/29")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p.Value), "released") {
		t.Errorf("a block written without a cooldown mentions a release time: %s", p.Value)
	}
}

// TestCoolingAttributeSpellings: a cooling attribute written with either
// spelling of its release time is read as cooling, and written back as
// released_at only.
func TestCoolingAttributeSpellings(t *testing.T) {
	for _, key := range []string{"released_at", "releasedAt"} {
		v := `{"cidr":"10.63.0.0/30","affinity":"host:n1","allocations":[0,null,null,null],"unallocated":[1,2,3],` +
			`"attributes":[{"` + key + `":"2026-01-02T03:04:05Z"}],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false}`
		b, err := decodeBlock([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		if c := b.cooling(); len(c) != 1 || c[0] != 0 || b.inUse() != 0 || b.empty() {
			t.Fatalf("%s: cooling %v, in use %d, empty %t", key, c, b.inUse(), b.empty())
		}
		out, err := b.encode()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"released_at":"2026-01-02T03:04:05Z"`) || strings.Contains(string(out), `releasedAt`) {
			t.Errorf("%s written back as %s", key, out)
		}
		// Long past: free at the next reclaim, queued after the others.
		if !b.reclaim(time.Now(), time.Minute) || len(b.cooling()) != 0 || b.Unallocated[3] != 0 {
			t.Errorf("%s: after reclaim cooling %v unallocated %v", key, b.cooling(), b.Unallocated)
		}
	}
}
