package rules

import (
	"fmt"
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
