package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// walk follows the -i dispatch from chain for iface as the kernel would
// and returns where it ends: a cali-fw- chain or "DROP".
func walk(t *testing.T, chains map[string][]Rule, chain, iface string) (string, int) {
	for hops := 0; hops < 20; hops++ {
		next := ""
		for _, r := range chains[chain] {
			f := strings.Fields(r.Match)
			if len(f) == 0 {
				if r.Action == "DROP" {
					return "DROP", hops
				}
				continue
			}
			name := f[1]
			matched := name == iface || strings.HasSuffix(name, "+") && strings.HasPrefix(iface, strings.TrimSuffix(name, "+"))
			if matched {
				next = f[len(f)-1]
				break
			}
		}
		if next == "" {
			t.Fatalf("chain %s: no rule for %s and no DROP", chain, iface)
		}
		if strings.HasPrefix(next, PrefixFromWorkload) {
			return next, hops
		}
		chain = next
	}
	t.Fatalf("dispatch of %s loops", iface)
	return "", 0
}

// TestDispatchTree: many endpoints are dispatched through a tree of short
// chains; every known interface reaches its own chain, any other cali
// interface is dropped, and no chain is long or badly named.
func TestDispatchTree(t *testing.T) {
	for _, n := range []int{3, 16, 17, 40, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			in := Input{Config: calc.MergeConfig(nil, nil), IPVersion: 4, Endpoints: map[calc.EndpointID]*calc.Endpoint{}}
			var ifaces []string
			for i := range n {
				iface := fmt.Sprintf("cali%011x", i*2654435761%(1<<40))
				if i%7 == 0 {
					iface = fmt.Sprintf("calib%010d", i)
				}
				ifaces = append(ifaces, iface)
				id := calc.EndpointID{Kind: calc.WorkloadEndpoint, Namespace: "ns", Name: iface}
				in.Endpoints[id] = &calc.Endpoint{ID: id, InterfaceName: iface}
			}
			rs := Render(in)
			chains := map[string][]Rule{}
			for _, c := range rs.Tables["filter"] {
				if len(c.Name) > MaxChainName {
					t.Errorf("chain name %s longer than %d", c.Name, MaxChainName)
				}
				if _, dup := chains[c.Name]; dup {
					t.Errorf("chain %s rendered twice", c.Name)
				}
				chains[c.Name] = c.Rules
				if strings.HasPrefix(c.Name, ChainFromWlDispatch) && len(c.Rules) > dispatchFanout+1 {
					t.Errorf("dispatch chain %s has %d rules", c.Name, len(c.Rules))
				}
			}
			for _, iface := range ifaces {
				if got, _ := walk(t, chains, ChainFromWlDispatch, iface); got != ChainName(PrefixFromWorkload, iface) {
					t.Errorf("%s dispatched to %s", iface, got)
				}
			}
			for _, unknown := range []string{"califfffffffff0", "calib9999999999", "cali", ifaces[0] + "x"} {
				if got, _ := walk(t, chains, ChainFromWlDispatch, unknown); got != "DROP" {
					t.Errorf("unknown %s dispatched to %s, want DROP", unknown, got)
				}
			}
		})
	}
}

// TestDispatchCacheSameAsFresh: interfaces come and go one at a time (a
// group splitting into a sub-chain, a sub-chain emptying, a lone
// interface joining a group); at every step the dispatch rendered with a
// cache carried from step to step is, chain for chain and hash for hash,
// the one rendered from nothing, and the cache does reuse sub-chains.
func TestDispatchCacheSameAsFresh(t *testing.T) {
	in := Input{Config: calc.MergeConfig(nil, nil), IPVersion: 4}
	var all []string
	for i := range 300 {
		all = append(all, fmt.Sprintf("cali%011x", i*2654435761%(1<<40)))
	}
	set := map[string]bool{}
	var cache DispatchCache
	reused := 0
	for step := range 600 {
		// Add the first 300 one by one, remove every other one, then add
		// them back in another order, some swapped for one present.
		switch iface := all[(step*7)%len(all)]; {
		case step < 300:
			set[all[step]] = true
		case step < 450:
			delete(set, all[(step-300)*2])
		case step%2 == 0:
			// One in, one out: the same count, other interfaces.
			for i := range set {
				delete(set, i)
				break
			}
			set[iface] = true
		default:
			set[iface] = true
		}
		var ifaces []string
		for i := range set {
			ifaces = append(ifaces, i)
		}
		slices.Sort(ifaces)
		before := cache.trees
		got := DispatchChains(in, ifaces, &cache)
		want := DispatchChains(in, ifaces, nil)
		if !slices.EqualFunc(got, want, func(a, b Chain) bool {
			return a.Name == b.Name && slices.Equal(a.Rules, b.Rules)
		}) {
			t.Fatalf("step %d (%d interfaces): the cached dispatch differs from a fresh one", step, len(ifaces))
		}
		for name, tree := range cache.trees {
			if old, ok := before[name]; ok && len(old.chains) > 0 && len(tree.chains) > 0 && &old.chains[0] == &tree.chains[0] {
				reused++
			}
		}
	}
	if reused == 0 {
		t.Error("the cache never reused a sub-tree")
	}
}
