package calc

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"
)

// TestHoldersIndex adds, replaces and removes items with single, shared
// and wide nets at random, and checks after each step that the address
// index names the same holders, in key order, as a walk of every item,
// and the pod and host endpoint indexes the same endpoints.
func TestHoldersIndex(t *testing.T) {
	x := newLabelIndex(newSequencer())
	rng := rand.New(rand.NewPCG(1, 18))
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1"}
	nets := append(slices.Clone(addrs), "10.0.0.0/30", "10.0.0.0/8", "fd00::/64")
	probe := append(slices.Clone(addrs), "10.0.0.9", "192.0.2.1")
	for step := range 2000 {
		key := "WorkloadEndpoint/ns/ep-" + strconv.Itoa(rng.IntN(12))
		if rng.IntN(4) == 0 {
			x.setItem(key, nil)
		} else {
			var ns []string
			for range rng.IntN(3) {
				ns = append(ns, nets[rng.IntN(len(nets))])
			}
			kind := itemWorkload
			if rng.IntN(3) == 0 {
				kind = itemHost
			}
			pod := "pod-" + strconv.Itoa(rng.IntN(4))
			x.setItem(key, &item{kind: kind, ns: "ns", pod: pod, nets: prefixes(ns)})
		}
		for _, a := range probe {
			addr := netip.MustParseAddr(a)
			var want []string
			for k, it := range x.items {
				if slices.ContainsFunc(it.nets, func(n netip.Prefix) bool { return n.Contains(addr) }) {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			var got []string
			for _, it := range x.holders(addr) {
				got = append(got, it.key)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: holders of %s %v, want %v", step, a, got, want)
			}
		}
		for _, pod := range []string{"pod-0", "pod-1", "pod-2", "pod-3"} {
			var want, got []string
			for k, it := range x.items {
				if it.kind == itemWorkload && it.pod == pod {
					want = append(want, k)
				}
			}
			for _, it := range x.pods["ns/"+pod] {
				got = append(got, it.key)
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: endpoints of pod %s %v, want %v", step, pod, got, want)
			}
		}
		hosts := 0
		for _, it := range x.items {
			if it.kind == itemHost {
				hosts++
				if _, ok := x.hosts[it]; !ok {
					t.Fatalf("step %d: host endpoint %s not indexed", step, it.key)
				}
			}
		}
		if len(x.hosts) != hosts {
			t.Fatalf("step %d: %d host endpoints indexed, %d present", step, len(x.hosts), hosts)
		}
	}
}
