package bgp_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMesh: three nodes in the default full mesh establish every session,
// route each other's blocks (blackholing their own), answer `gobgp
// neighbor`, and withdraw a block everywhere when its affinity goes.
func TestMesh(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	names := []string{"n1", "n2", "n3"}
	addrs := map[string]string{"n1": "198.18.0.1", "n2": "198.18.0.2", "n3": "198.18.0.3"}
	blocks := map[string]netip.Prefix{}
	for _, n := range names {
		f.node(n, addrs[n]+"/24", nil)
		blocks[n] = f.block(n)
	}
	for _, n := range names {
		f.start(n)
	}
	for _, n := range names {
		for _, o := range names {
			if o == n {
				eventually(t, 20*time.Second, n+" blackholes its block", func() (bool, string) {
					out := f.ours(f.ns[n], blocks[n].String())
					return strings.Contains(out, "blackhole "+blocks[n].String()), out
				})
				continue
			}
			f.waitRoute(f.ns[n], blocks[o], addrs[o])
		}
	}
	// The stock gobgp CLI reads the node's gRPC API.
	out, err := exec.Command("ip", "netns", "exec", f.ns["n1"], "gobgp", "-u", "127.0.0.1", "-p", "50051", "neighbor").CombinedOutput()
	if err != nil {
		t.Fatalf("gobgp neighbor: %v\n%s", err, out)
	}
	for _, a := range []string{"198.18.0.2", "198.18.0.3"} {
		if !strings.Contains(string(out), a) || strings.Count(string(out), "Establ") != 2 {
			t.Errorf("gobgp neighbor does not list %s Established:\n%s", a, out)
		}
	}
	// n3's block goes: withdrawn from n1 and n2, its blackhole removed.
	if err := f.alloc.ReleaseHostAffinities(context.Background(), "n3"); err != nil {
		// The block still holds an address: release it first.
		t.Logf("release affinities: %v", err)
	}
	if err := f.alloc.ReleaseByHandle(context.Background(), "h-n3"); err != nil {
		t.Fatal(err)
	}
	if err := f.alloc.ReleaseHostAffinities(context.Background(), "n3"); err != nil {
		t.Fatal(err)
	}
	f.waitRoute(f.ns["n1"], blocks["n3"], "")
	f.waitRoute(f.ns["n2"], blocks["n3"], "")
	f.waitRoute(f.ns["n3"], blocks["n3"], "")
	// The others are untouched.
	f.waitRoute(f.ns["n1"], blocks["n2"], addrs["n2"])
}
