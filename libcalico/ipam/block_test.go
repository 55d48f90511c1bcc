package ipam

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustPrefix(t testing.TB, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return p
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestBlockOrdinals(t *testing.T) {
	tests := []struct {
		cidr    string
		ordinal int
		addr    string
	}{
		{"10.0.0.0/26", 0, "10.0.0.0"},
		{"10.0.0.0/26", 63, "10.0.0.63"},
		{"10.1.255.0/24", 255, "10.1.255.255"},
		{"10.0.0.192/26", 5, "10.0.0.197"},
		{"fd00::/122", 0, "fd00::"},
		{"fd00::40/122", 63, "fd00::7f"},
		{"fd00:0:0:1::/120", 255, "fd00:0:0:1::ff"},
	}
	for _, tc := range tests {
		t.Run(tc.cidr+"/"+tc.addr, func(t *testing.T) {
			b := newBlock(mustPrefix(t, tc.cidr), "")
			if got := b.addr(tc.ordinal); got != netip.MustParseAddr(tc.addr) {
				t.Errorf("block %s: ordinal %d is %s, want %s", tc.cidr, tc.ordinal, got, tc.addr)
			}
			o, ok := b.ordinal(netip.MustParseAddr(tc.addr))
			if !ok || o != tc.ordinal {
				t.Errorf("block %s: %s has ordinal %d (in block %t), want %d", tc.cidr, tc.addr, o, ok, tc.ordinal)
			}
		})
	}
	b := newBlock(mustPrefix(t, "10.0.0.0/26"), "")
	if _, ok := b.ordinal(netip.MustParseAddr("10.0.0.64")); ok {
		t.Errorf("10.0.0.64 reported inside 10.0.0.0/26")
	}
}

func TestAddOffsetCarriesIntoHighHalf(t *testing.T) {
	got := addOffset(netip.MustParseAddr("fd00::ffff:ffff:ffff:ffc0"), 0x40)
	if want := netip.MustParseAddr("fd00:0:0:1::"); got != want {
		t.Errorf("fd00::ffff:ffff:ffff:ffc0 + 64 = %s, want %s", got, want)
	}
}

func TestBlockAssignAndRelease(t *testing.T) {
	tests := []struct {
		name      string
		cidr      string
		reserved  []string
		preassign []string // taken before the test by handle "other"
		n         int
		want      []string
		release   []string
		wantNot   []string // release reports these as not allocated
		wantInUse int
	}{
		{name: "first addresses, network address included", cidr: "10.0.0.0/30", n: 2,
			want: []string{"10.0.0.0", "10.0.0.1"}, wantInUse: 2},
		{name: "whole block including broadcast", cidr: "10.0.0.0/30", n: 5,
			want: []string{"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3"}, wantInUse: 4},
		{name: "reserved addresses skipped", cidr: "10.0.0.0/29", reserved: []string{"10.0.0.0/31", "10.0.0.3/32"}, n: 3,
			want: []string{"10.0.0.2", "10.0.0.4", "10.0.0.5"}, wantInUse: 3},
		{name: "taken addresses skipped", cidr: "10.0.0.0/29", preassign: []string{"10.0.0.1"}, n: 2,
			want: []string{"10.0.0.0", "10.0.0.2"}, wantInUse: 3},
		{name: "release some, one not allocated", cidr: "10.0.0.0/29", n: 3,
			want:    []string{"10.0.0.0", "10.0.0.1", "10.0.0.2"},
			release: []string{"10.0.0.1", "10.0.0.7", "10.0.1.1"}, wantNot: []string{"10.0.0.7", "10.0.1.1"}, wantInUse: 2},
		{name: "ipv6", cidr: "fd00::/126", n: 2, want: []string{"fd00::", "fd00::1"}, wantInUse: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBlock(mustPrefix(t, tc.cidr), "node-a")
			for _, a := range tc.preassign {
				if err := b.assignAddr(netip.MustParseAddr(a), "other", nil); err != nil {
					t.Fatal(err)
				}
			}
			var res reservations
			for _, r := range tc.reserved {
				res = append(res, mustPrefix(t, r))
			}
			got := b.assign(tc.n, "h1", map[string]string{"pod": "p"}, res.skip())
			if !slices.Equal(got, addrs(tc.want...)) {
				t.Fatalf("assign %d from %s = %v, want %v", tc.n, tc.cidr, got, tc.want)
			}
			if tc.release != nil {
				freed, not := b.release(addrs(tc.release...))
				if !slices.Equal(not, addrs(tc.wantNot...)) {
					t.Errorf("release %v: not allocated %v, want %v", tc.release, not, tc.wantNot)
				}
				if freed["h1"] != len(tc.release)-len(tc.wantNot) {
					t.Errorf("release %v: freed %v for h1", tc.release, freed)
				}
			}
			if b.inUse() != tc.wantInUse {
				t.Errorf("in use %d, want %d", b.inUse(), tc.wantInUse)
			}
			checkConsistent(t, b)
		})
	}
}

func TestBlockReleasedAddressesGoLast(t *testing.T) {
	b := newBlock(mustPrefix(t, "10.0.0.0/30"), "")
	b.assign(2, "h", nil, nil)
	b.release(addrs("10.0.0.0"))
	got := b.assign(2, "h", nil, nil)
	if want := addrs("10.0.0.2", "10.0.0.3"); !slices.Equal(got, want) {
		t.Errorf("after releasing 10.0.0.0 got %v, want %v (fresh addresses before reused ones)", got, want)
	}
	if got := b.assign(1, "h", nil, nil); !slices.Equal(got, addrs("10.0.0.0")) {
		t.Errorf("then got %v, want the released 10.0.0.0", got)
	}
}

func TestBlockAssignAddrConflict(t *testing.T) {
	b := newBlock(mustPrefix(t, "10.0.0.0/28"), "")
	ip := netip.MustParseAddr("10.0.0.5")
	if err := b.assignAddr(ip, "h1", nil); err != nil {
		t.Fatal(err)
	}
	err := b.assignAddr(ip, "h2", nil)
	if err == nil || !strings.Contains(err.Error(), `handle "h1"`) {
		t.Errorf("second assign of %s: err %v, want already assigned to h1", ip, err)
	}
	if err := b.assignAddr(netip.MustParseAddr("10.0.1.5"), "h1", nil); err == nil {
		t.Errorf("assigning an address outside the block succeeded")
	}
	if slices.Contains(b.Unallocated, 5) {
		t.Errorf("ordinal 5 still listed unallocated")
	}
}

func TestBlockAttributesShareAndCompact(t *testing.T) {
	b := newBlock(mustPrefix(t, "10.0.0.0/28"), "")
	b.assign(2, "a", map[string]string{"pod": "a"}, nil)
	b.assign(1, "b", map[string]string{"pod": "b"}, nil)
	b.assign(1, "c", nil, nil)
	if len(b.Attributes) != 3 {
		t.Fatalf("%d attributes, want 3 (a's two addresses share one)", len(b.Attributes))
	}
	if n := b.releaseHandle("a", time.Time{}); n != 2 {
		t.Errorf("released %d addresses of handle a, want 2", n)
	}
	if len(b.Attributes) != 2 || b.Attributes[0].handle() != "b" || b.Attributes[1].handle() != "c" {
		t.Errorf("attributes after compaction: %+v, want b then c", b.Attributes)
	}
	if got := b.handleCounts(); got["b"] != 1 || got["c"] != 1 || len(got) != 2 {
		t.Errorf("handle counts %v", got)
	}
	checkConsistent(t, b)
}

func TestBlockJSONShape(t *testing.T) {
	b := newBlock(mustPrefix(t, "10.0.0.0/30"), "node-a")
	b.assign(1, "k8s-pod-network.abc", map[string]string{"namespace": "default", "pod": "web", "node": "node-a"}, nil)
	v, err := b.encode()
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(v, &raw); err != nil {
		t.Fatal(err)
	}
	keys := []string{"cidr", "affinity", "affinity_claim_time", "allocations", "unallocated", "attributes", "sequenceNumber", "sequenceNumberForAllocation", "deleted"}
	if len(raw) != len(keys) {
		t.Errorf("stored block has %d fields, want Calico's %d: %s", len(raw), len(keys), v)
	}
	for _, k := range keys {
		if _, ok := raw[k]; !ok {
			t.Errorf("stored block lacks %q: %s", k, v)
		}
	}
	if raw["affinity"] != "host:node-a" {
		t.Errorf("affinity %v, want host:node-a", raw["affinity"])
	}
	if got := string(mustJSON(t, raw["allocations"])); got != "[0,null,null,null]" {
		t.Errorf("allocations %s, want [0,null,null,null]", got)
	}
	attrs := string(mustJSON(t, raw["attributes"]))
	if !strings.Contains(attrs, `"handle_id":"k8s-pod-network.abc"`) || !strings.Contains(attrs, `"secondary":{`) {
		t.Errorf("attributes %s lack handle_id/secondary", attrs)
	}
	back, err := decodeBlock(v)
	if err != nil {
		t.Fatal(err)
	}
	if back.host() != "node-a" || back.inUse() != 1 || back.prefix != b.prefix {
		t.Errorf("round trip lost data: %+v", back)
	}
}

func TestDecodeBlockRejects(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{"bad json", `{`, "decoding block"},
		{"bad cidr", `{"cidr":"10.0.0.0/33"}`, `block cidr "10.0.0.0/33"`},
		{"host bits", `{"cidr":"10.0.0.1/30","allocations":[null,null,null,null]}`, "host bits"},
		{"wrong length", `{"cidr":"10.0.0.0/30","allocations":[null]}`, "1 allocations for 4 addresses"},
		{"dangling attribute", `{"cidr":"10.0.0.0/31","allocations":[3,null],"unallocated":[1]}`, "refers to attribute 3"},
		{"bad unallocated", `{"cidr":"10.0.0.0/31","allocations":[null,null],"unallocated":[0,7]}`, "unallocated ordinal 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeBlock([]byte(tc.value))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeBlock(%s) error %v, want it to mention %q", tc.value, err, tc.want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkConsistent asserts every ordinal is either allocated or listed
// unallocated exactly once, and attributes are all referenced.
func checkConsistent(t *testing.T, b *block) {
	t.Helper()
	seen := make([]int, len(b.Allocations))
	for _, o := range b.Unallocated {
		seen[o]++
		if b.Allocations[o] != nil {
			t.Errorf("ordinal %d both allocated and unallocated", o)
		}
	}
	used := make([]bool, len(b.Attributes))
	for o, idx := range b.Allocations {
		if idx != nil {
			seen[o]++
			used[*idx] = true
		}
	}
	for o, n := range seen {
		if n != 1 {
			t.Errorf("ordinal %d accounted %d times", o, n)
		}
	}
	for i, u := range used {
		if !u {
			t.Errorf("attribute %d unreferenced", i)
		}
	}
}

func TestKeys(t *testing.T) {
	p4, p6 := mustPrefix(t, "10.0.0.0/26"), mustPrefix(t, "fd00:1::40/122")
	tests := []struct{ got, want string }{
		{blockKey(p4), "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26"},
		{blockKey(p6), "/calico/ipam/v2/assignment/ipv6/block/fd00:1::40-122"},
		{affinityKey("node-a", p4), "/calico/ipam/v2/host/node-a/ipv4/block/10.0.0.0-26"},
		{handleKey("k8s-pod-network.abc"), "/calico/ipam/v2/handle/k8s-pod-network.abc"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
	if got, err := parseBlockKey(blockKey(p6)); err != nil || got != p6 {
		t.Errorf("parseBlockKey round trip: %v %v", got, err)
	}
	host, got, err := parseAffinityKey(affinityKey("node-a", p6))
	if err != nil || host != "node-a" || got != p6 {
		t.Errorf("parseAffinityKey round trip: %q %v %v", host, got, err)
	}
}
