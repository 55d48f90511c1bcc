package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func TestAutoAssignFamilies(t *testing.T) {
	tests := []struct {
		name       string
		num4, num6 int
		want4      []string
		want6      []string
	}{
		{name: "ipv4", num4: 2, want4: []string{"10.0.0.0/26", "10.0.0.0/26"}},
		{name: "ipv6", num6: 2, want6: []string{"fd00::/122", "fd00::/122"}},
		{name: "dual stack", num4: 1, num6: 1, want4: []string{"10.0.0.0/26"}, want6: []string{"fd00::/122"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			// One-block pools make the block predictable.
			e.pool("v4", "10.0.0.0/26", nil)
			e.pool("v6", "fd00::/122", nil)
			v4, v6 := e.assign(AutoAssignArgs{Num4: tc.num4, Num6: tc.num6, HandleID: "h", Hostname: "node-a",
				Attrs: map[string]string{"namespace": "default", "pod": "web"}})
			check := func(fam string, got []netip.Prefix, want []string) {
				if len(got) != len(want) {
					t.Fatalf("%s: got %v, want %d addresses", fam, got, len(want))
				}
				for i, p := range got {
					blk := mustPrefix(t, want[i])
					if !blk.Contains(p.Addr()) || p.Bits() != blk.Bits() {
						t.Errorf("%s: address %s not in block %s with its prefix length", fam, p, blk)
					}
				}
			}
			check("IPv4", v4, tc.want4)
			check("IPv6", v6, tc.want6)
			if got := e.handles()["h"]; got != tc.num4+tc.num6 {
				t.Errorf("handle h counts %d, want %d", got, tc.num4+tc.num6)
			}
			ips, err := e.alloc.IPsByHandle(ctxT(t), "h")
			if err != nil || len(ips) != tc.num4+tc.num6 {
				t.Errorf("IPsByHandle: %v %v", ips, err)
			}
			for _, p := range append(v4, v6...) {
				al, err := e.alloc.GetAssignmentAttributes(ctxT(t), p.Addr())
				if err != nil || al.HandleID != "h" || al.Attrs["pod"] != "web" {
					t.Errorf("attributes of %s: %+v %v", p, al, err)
				}
			}
			e.checkInvariants()
		})
	}
}

func TestBlockClaimingUsesPoolBlockSize(t *testing.T) {
	e := newEnv(t)
	e.pool("default-size", "10.0.0.0/16", nil)
	e.pool("small", "10.1.0.0/16", func(s *v3.IPPoolSpec) { s.BlockSize = 29 })
	v4, _ := e.assign(AutoAssignArgs{Num4: 1, Hostname: "node-a", IPv4Pools: []string{"default-size"}})
	if v4[0].Bits() != 26 {
		t.Errorf("default pool gave %s, want a /26 block", v4[0])
	}
	v4, _ = e.assign(AutoAssignArgs{Num4: 10, Hostname: "node-a", IPv4Pools: []string{"10.1.0.0/16"}})
	blocks := map[netip.Prefix]bool{}
	for _, p := range v4 {
		if p.Bits() != 29 {
			t.Errorf("small pool gave %s, want /29", p)
		}
		blocks[p.Masked()] = true
	}
	if len(blocks) != 2 {
		t.Errorf("10 addresses in /29 blocks used %d blocks, want 2", len(blocks))
	}
	for c := range blocks {
		if st := e.affinities()["node-a "+c.String()]; st != AffinityConfirmed {
			t.Errorf("affinity of node-a to %s is %q, want confirmed", c, st)
		}
		raw, err := e.store.KV().Get(ctxT(t), "/calico/ipam/v2/assignment/ipv4/block/"+c.Addr().String()+"-29")
		if err != nil || !strings.Contains(string(raw.Value), `"affinity":"host:node-a"`) {
			t.Errorf("block %s stored as %s (%v)", c, raw.Value, err)
		}
	}
	// The node's existing block is used before a new one is claimed.
	before := len(e.blocks())
	e.assign(AutoAssignArgs{Num4: 1, Hostname: "node-a", IPv4Pools: []string{"small"}})
	if after := len(e.blocks()); after != before {
		t.Errorf("blocks %d → %d: an address free in an affine block should not claim a new one", before, after)
	}
	e.checkInvariants()
}

func TestMaxBlocksPerHost(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 30 })
	if err := e.alloc.SetConfig(ctxT(t), Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 2}); err != nil {
		t.Fatal(err)
	}
	v4, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 10, Hostname: "node-a", HandleID: "h"})
	wantErrIs(t, err, ErrExhausted)
	if v4 == nil || len(v4.IPs) != 8 {
		t.Fatalf("with 2 blocks of 4 got %v, want 8 addresses and an error", v4)
	}
	if n := len(e.blocks()); n != 2 {
		t.Errorf("%d blocks claimed, want 2", n)
	}
	// A per-request limit tighter than the configuration wins.
	_, _, err = e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 5, Hostname: "node-b", MaxBlocksPerHost: 1})
	wantErrIs(t, err, ErrExhausted)
	if n := len(e.blocks()); n != 3 {
		t.Errorf("%d blocks after node-b's request, want 3", n)
	}
	e.checkInvariants()
}

func TestBorrowingAndStrictAffinity(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "borrow", true: "strict"}[strict], func(t *testing.T) {
			e := newEnv(t)
			e.pool("p", "10.0.0.0/28", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
			if err := e.alloc.SetConfig(ctxT(t), Config{StrictAffinity: strict, AutoAllocateBlocks: true}); err != nil {
				t.Fatal(err)
			}
			e.assign(AutoAssignArgs{Num4: 1, Hostname: "node-a"})
			v4, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 2, Hostname: "node-b", HandleID: "b"})
			if strict {
				wantErrIs(t, err, ErrExhausted)
				if len(v4.IPs) != 0 {
					t.Errorf("strict affinity borrowed %v", v4.IPs)
				}
				return
			}
			if err != nil || len(v4.IPs) != 2 {
				t.Fatalf("borrowing: %v %v", v4, err)
			}
			b := e.blocks()[mustPrefix(t, "10.0.0.0/28")]
			if b.Host != "node-a" || len(b.Allocations) != 3 {
				t.Errorf("block after borrowing: host %q, %d allocations; want node-a, 3", b.Host, len(b.Allocations))
			}
			if _, ok := e.affinities()["node-b 10.0.0.0/28"]; ok {
				t.Errorf("borrowing node got an affinity")
			}
			e.checkInvariants()
		})
	}
}

func TestPoolSelection(t *testing.T) {
	manual := v3.AssignmentManual
	tests := []struct {
		name    string
		args    AutoAssignArgs
		want    string // pool CIDR the address must be in
		wantErr error
	}{
		{name: "disabled pool skipped", args: AutoAssignArgs{Num4: 1, Hostname: "plain"}, want: "10.0.0.0/16"},
		{name: "node selector matches", args: AutoAssignArgs{Num4: 1, Hostname: "rack1-node", IPv4Pools: nil}, want: "10.0.0.0/16"},
		{name: "requested selector pool", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"rack1"}}, want: "10.2.0.0/16"},
		{name: "tunnel intent", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"tunnels"}, Intent: IntentTunnel}, want: "10.3.0.0/16"},
		{name: "workload from tunnel-only pool", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"tunnels"}}, wantErr: ErrNoPools},
		{name: "requested disabled pool", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"off"}}, wantErr: ErrPoolNotUsable},
		{name: "requested manual pool", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"10.4.0.0/16"}}, want: "10.4.0.0/16"},
		{name: "no ipv6 pool", args: AutoAssignArgs{Num6: 1, Hostname: "plain"}, wantErr: ErrNoPools},
		{name: "load balancer intent", args: AutoAssignArgs{Num4: 1, Hostname: LoadBalancerHost, Intent: IntentLoadBalancer}, want: "10.5.0.0/16"},
		{name: "load balancer from workload pool", args: AutoAssignArgs{Num4: 1, Hostname: LoadBalancerHost, IPv4Pools: []string{"main"}, Intent: IntentLoadBalancer}, wantErr: ErrNoPools},
		{name: "load balancer from unset uses", args: AutoAssignArgs{Num4: 1, Hostname: LoadBalancerHost, IPv4Pools: []string{"unset"}, Intent: IntentLoadBalancer}, wantErr: ErrNoPools},
		{name: "workload from load balancer pool", args: AutoAssignArgs{Num4: 1, Hostname: "plain", IPv4Pools: []string{"lb"}}, wantErr: ErrNoPools},
	}
	e := newEnv(t)
	e.pool("main", "10.0.0.0/16", func(s *v3.IPPoolSpec) { s.NodeSelector = "!has(rack)" })
	e.pool("off", "10.1.0.0/16", func(s *v3.IPPoolSpec) { s.Disabled = true })
	e.pool("rack1", "10.2.0.0/16", func(s *v3.IPPoolSpec) { s.NodeSelector = "rack == 'r1'" })
	e.pool("tunnels", "10.3.0.0/16", func(s *v3.IPPoolSpec) {
		s.AllowedUses = []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseTunnel}
	})
	e.pool("manual", "10.4.0.0/16", func(s *v3.IPPoolSpec) { s.AssignmentMode = &manual })
	e.pool("lb", "10.5.0.0/16", func(s *v3.IPPoolSpec) {
		s.AllowedUses = []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseLoadBalancer}
	})
	e.pool("unset", "10.6.0.0/16", func(s *v3.IPPoolSpec) { s.NodeSelector = "has(nothing)" })
	e.node("rack1-node", map[string]string{"rack": "r1"})
	tests[1].want = "10.2.0.0/16" // rack1-node is selected by rack1 only
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v4, _, err := e.alloc.AutoAssign(ctxT(t), tc.args)
			if tc.wantErr != nil {
				wantErrIs(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p := mustPrefix(t, tc.want); len(v4.IPs) != 1 || !p.Contains(v4.IPs[0].Addr()) {
				t.Errorf("got %v, want an address in %s", v4.IPs, p)
			}
		})
	}
}

func TestReservationsHonoured(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/26", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	// The node's preferred first block is wholly reserved, and parts of
	// the others.
	e.reserve("r", "10.0.0.0/28", "10.0.0.16/30", "10.0.0.33")
	v4, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 64, Hostname: "node-a", HandleID: "h"})
	wantErrIs(t, err, ErrExhausted)
	if len(v4.IPs) != 64-16-4-1 {
		t.Errorf("got %d addresses, want %d (all but the reserved)", len(v4.IPs), 64-16-4-1)
	}
	rs := reservations{mustPrefix(t, "10.0.0.0/28"), mustPrefix(t, "10.0.0.16/30"), mustPrefix(t, "10.0.0.33/32")}
	for _, p := range v4.IPs {
		if rs.contains(p.Addr()) {
			t.Errorf("reserved address %s handed out", p)
		}
	}
	if _, ok := e.blocks()[mustPrefix(t, "10.0.0.0/28")]; ok {
		t.Errorf("a wholly reserved block was claimed")
	}
	// An explicit request may still take a reserved address.
	if err := e.alloc.AssignIP(ctxT(t), AssignIPArgs{IP: netip.MustParseAddr("10.0.0.33"), HandleID: "x", Hostname: "node-a"}); err != nil {
		t.Errorf("assigning reserved 10.0.0.33 explicitly: %v", err)
	}
	e.checkInvariants()
}

func TestAssignIP(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", nil)
	ctx := ctxT(t)
	ip := netip.MustParseAddr("10.0.0.70")
	if err := e.alloc.AssignIP(ctx, AssignIPArgs{IP: ip, HandleID: "h1", Hostname: "node-a", Attrs: map[string]string{"pod": "a"}}); err != nil {
		t.Fatal(err)
	}
	if b := e.blocks()[mustPrefix(t, "10.0.0.64/26")]; b.Host != "node-a" || len(b.Allocations) != 1 || b.Allocations[0].IP != ip {
		t.Errorf("block after AssignIP: %+v", b)
	}
	tests := []struct {
		name string
		args AssignIPArgs
		want error
	}{
		{"already assigned", AssignIPArgs{IP: ip, HandleID: "h2"}, ErrAlreadyAssigned},
		{"outside every pool", AssignIPArgs{IP: netip.MustParseAddr("192.168.1.1"), HandleID: "h2"}, ErrNotInPool},
		{"invalid handle", AssignIPArgs{IP: netip.MustParseAddr("10.0.0.1"), HandleID: "a/b"}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErrIs(t, e.alloc.AssignIP(ctx, tc.args), tc.want)
		})
	}
	// Another node's block: the address is assigned there, affinity kept.
	if err := e.alloc.AssignIP(ctx, AssignIPArgs{IP: netip.MustParseAddr("10.0.0.71"), HandleID: "h2", Hostname: "node-b"}); err != nil {
		t.Fatal(err)
	}
	if b := e.blocks()[mustPrefix(t, "10.0.0.64/26")]; b.Host != "node-a" || len(b.Allocations) != 2 {
		t.Errorf("block after node-b's AssignIP: %+v", b)
	}
	// Without a host, a new block has no affinity.
	if err := e.alloc.AssignIP(ctx, AssignIPArgs{IP: netip.MustParseAddr("10.0.0.200"), HandleID: "h3"}); err != nil {
		t.Fatal(err)
	}
	if b := e.blocks()[mustPrefix(t, "10.0.0.192/26")]; b.Host != "" {
		t.Errorf("hostless AssignIP made a block affine to %q", b.Host)
	}
	if got := e.handles(); got["h1"] != 1 || got["h2"] != 1 || got["h3"] != 1 || len(got) != 3 {
		t.Errorf("handles %v; the failed assignments must leave none behind", got)
	}
	e.checkInvariants()
	// Releasing the only address of an unaffine block deletes the block.
	if _, err := e.alloc.ReleaseIPs(ctx, netip.MustParseAddr("10.0.0.200")); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.blocks()[mustPrefix(t, "10.0.0.192/26")]; ok {
		t.Errorf("empty unaffine block not deleted")
	}
}

func TestReleaseByIPAndHandle(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", nil)
	e.pool("p6", "fd00::/120", nil)
	ctx := ctxT(t)
	a4, a6 := e.assign(AutoAssignArgs{Num4: 3, Num6: 2, HandleID: "h1", Hostname: "node-a"})
	b4, _ := e.assign(AutoAssignArgs{Num4: 2, HandleID: "h2", Hostname: "node-a"})

	unalloc, err := e.alloc.ReleaseIPs(ctx, a4[0].Addr(), netip.MustParseAddr("10.0.0.250"), netip.MustParseAddr("172.16.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := addrs("10.0.0.250", "172.16.0.1"); !slices.Equal(sortedAddrs(unalloc), want) {
		t.Errorf("unallocated %v, want %v", unalloc, want)
	}
	if got := e.handles()["h1"]; got != 4 {
		t.Errorf("h1 counts %d after releasing one of 5, want 4", got)
	}
	if _, err := e.alloc.GetAssignmentAttributes(ctx, a4[0].Addr()); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("released address still has attributes: %v", err)
	}
	e.checkInvariants()

	if err := e.alloc.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.handles()["h1"]; ok {
		t.Errorf("handle h1 still stored after release by handle")
	}
	for _, p := range append(a4[1:], a6...) {
		if _, err := e.alloc.GetAssignmentAttributes(ctx, p.Addr()); !errors.Is(err, ErrNotAssigned) {
			t.Errorf("%s still assigned after release by handle: %v", p, err)
		}
	}
	if ips, err := e.alloc.IPsByHandle(ctx, "h2"); err != nil || len(ips) != 2 || ips[0] != b4[0].Addr() {
		t.Errorf("h2 holds %v (%v), want %v", ips, err, b4)
	}
	if err := e.alloc.ReleaseByHandle(ctx, "h1"); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("releasing a gone handle: %v, want not found", err)
	}
	// Affine blocks stay claimed while empty.
	if len(e.blocks()) != 2 {
		t.Errorf("blocks %v, want the two affine blocks kept", e.blocks())
	}
	e.checkInvariants()
}

func sortedAddrs(as []netip.Addr) []netip.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func TestAffinityLifecycle(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	ctx := ctxT(t)
	a, _ := e.assign(AutoAssignArgs{Num4: 20, HandleID: "a", Hostname: "node-a"}) // two blocks
	e.assign(AutoAssignArgs{Num4: 1, HandleID: "b", Hostname: "node-b"})
	if n := len(e.affinities()); n != 3 {
		t.Fatalf("%d affinities, want 3", n)
	}
	// Empty the second block of node-a.
	full, second := a[0].Masked(), a[19].Masked()
	var inSecond []netip.Addr
	for _, p := range a {
		if p.Masked() == second {
			inSecond = append(inSecond, p.Addr())
		}
	}
	if _, err := e.alloc.ReleaseIPs(ctx, inSecond...); err != nil {
		t.Fatal(err)
	}
	freed, err := e.alloc.FreeEmptyBlocks(ctx, "node-a")
	if err != nil || len(freed) != 1 || freed[0] != second {
		t.Fatalf("FreeEmptyBlocks: %v %v, want [%s]", freed, err, second)
	}
	if _, ok := e.blocks()[second]; ok {
		t.Errorf("freed block %s still stored", second)
	}

	if err := e.alloc.ReleaseHostAffinities(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	affs := e.affinities()
	if _, ok := affs["node-a "+full.String()]; ok || len(affs) != 1 {
		t.Errorf("affinities after releasing node-a: %v, want only node-b's", affs)
	}
	b, ok := e.blocks()[full]
	if !ok || b.Host != "" || len(b.Allocations) != 16 {
		t.Errorf("block %s in use must stay without affinity: %+v", full, b)
	}
	e.checkInvariants()
	// Its last addresses released, the unaffine block goes.
	if err := e.alloc.ReleaseByHandle(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.blocks()[full]; ok {
		t.Errorf("block %s kept after its last address was released", full)
	}
	// Releasing a pool's affinities frees node-b's (now empty) block.
	if err := e.alloc.ReleaseByHandle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := e.alloc.ReleasePoolAffinities(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if len(e.blocks()) != 0 || len(e.affinities()) != 0 {
		t.Errorf("left behind: blocks %v affinities %v", e.blocks(), e.affinities())
	}
}

func TestUtilizationAndConfig(t *testing.T) {
	e := newEnv(t)
	e.pool("a", "10.0.0.0/24", nil)
	e.pool("b", "10.1.0.0/24", nil)
	ctx := ctxT(t)
	cfg, err := e.alloc.GetConfig(ctx)
	if err != nil || cfg != (Config{AutoAllocateBlocks: true}) {
		t.Errorf("default config %+v %v", cfg, err)
	}
	want := Config{StrictAffinity: true, AutoAllocateBlocks: false, MaxBlocksPerHost: 3}
	if err := e.alloc.SetConfig(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got, err := e.alloc.GetConfig(ctx); err != nil || got != want {
		t.Errorf("config read back %+v %v, want %+v", got, err, want)
	}
	_, _, err = e.alloc.AutoAssign(ctx, AutoAssignArgs{Num4: 1, Hostname: "n"})
	wantErrIs(t, err, ErrExhausted) // no automatic blocks, strict: nothing
	if err := e.alloc.SetConfig(ctx, Config{AutoAllocateBlocks: true}); err != nil {
		t.Fatal(err)
	}
	e.assign(AutoAssignArgs{Num4: 5, Hostname: "n", IPv4Pools: []string{"a"}})
	us, err := e.alloc.GetUtilization(ctx, UtilizationOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 2 || us[0].Name != "a" || us[0].Capacity != 256 || us[0].InUse != 5 || us[0].Free() != 251 ||
		len(us[0].Blocks) != 1 || us[0].Blocks[0].Capacity != 64 || us[0].Blocks[0].Host != "n" ||
		us[1].InUse != 0 || len(us[1].Blocks) != 0 {
		t.Errorf("utilization %+v", us)
	}
	if _, err := e.alloc.GetUtilization(ctx, UtilizationOptions{Pools: []string{"nope"}}); !errors.Is(err, ErrPoolNotUsable) {
		t.Errorf("utilization of a missing pool: %v", err)
	}
}

// TestAssignIPIntent: a specific address asked for with an intent must
// lie in a pool allowing it, so a LoadBalancer address never comes from
// a workload pool, nor a workload's from a LoadBalancer pool.
func TestAssignIPIntent(t *testing.T) {
	e := newEnv(t)
	e.pool("main", "10.0.0.0/16", nil)
	e.pool("lb", "10.5.0.0/16", func(s *v3.IPPoolSpec) {
		s.AllowedUses = []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseLoadBalancer}
	})
	for _, tc := range []struct {
		ip      string
		intent  Intent
		wantErr error
	}{
		{"10.5.0.7", IntentLoadBalancer, nil},
		{"10.0.0.7", IntentLoadBalancer, ErrNoPools},
		{"10.5.0.8", IntentWorkload, ErrNoPools},
		{"10.0.0.8", IntentWorkload, nil},
	} {
		err := e.alloc.AssignIP(ctxT(t), AssignIPArgs{IP: netip.MustParseAddr(tc.ip), HandleID: "h-" + tc.ip, Hostname: LoadBalancerHost, Intent: tc.intent})
		if tc.wantErr != nil {
			wantErrIs(t, err, tc.wantErr)
		} else if err != nil {
			t.Errorf("%s for %s: %v", tc.ip, tc.intent, err)
		}
	}
}
