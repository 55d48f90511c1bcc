package routepolicy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/node/bgp/peers"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// interfaces every node of the golden tests has.
var interfaces = map[string][]netip.Prefix{
	"eth0":         {netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("fd00:198:18::/64")},
	"eth1":         {netip.MustParsePrefix("198.19.1.0/24")},
	"vxlan.calico": {netip.MustParsePrefix("10.244.7.0/32")},
}

// TestGolden compiles the policy of every node in every topology under
// testdata and compares it (and the errors) with testdata/<topology>.golden.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no topologies: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := v3.Decode(data)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var in peers.Input
			var filters []v3.BGPFilter
			for _, r := range rs {
				switch o := r.(type) {
				case *v3.Node:
					in.Nodes = append(in.Nodes, *o)
				case *v3.BGPPeer:
					in.Peers = append(in.Peers, *o)
				case *v3.BGPConfiguration:
					in.Config = &o.Spec
				case *v3.BGPFilter:
					filters = append(filters, *o)
				default:
					t.Fatalf("%s: unexpected %T", f, r)
				}
			}
			var out bytes.Buffer
			for _, n := range in.Nodes {
				in.NodeName = n.Name
				res, perrs := peers.Compute(in)
				if len(perrs) > 0 {
					t.Fatalf("node %s: %v", n.Name, perrs)
				}
				pol, errs := Compile(Input{Local: res.Local, Peers: res.Peers, Filters: res.Filters, BGPFilters: filters, Interfaces: interfaces})
				b, _ := json.MarshalIndent(pol, "", "  ")
				fmt.Fprintf(&out, "# node %s\n%s\n", n.Name, b)
				for _, e := range errs {
					fmt.Fprintf(&out, "error: %v\n", e)
				}
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(want, out.Bytes()) {
				t.Errorf("%s differs (run with -update and review the diff):\n%s", golden, out.String())
			}
		})
	}
}

func TestChangedPeers(t *testing.T) {
	peer := "palisade-peer-198.18.0.250"
	acc := Statement{Name: "a", Neighbors: peer, Source: SourceInternal, Action: ActionAccept}
	rej := Statement{Name: "r", Neighbors: peer, Prefixes: "p", Action: ActionReject}
	for _, tc := range []struct {
		name            string
		old, new        []Statement
		changed, losing bool
	}{
		{"same", []Statement{acc}, []Statement{acc}, false, false},
		{"accept added", nil, []Statement{acc}, true, false},
		{"accept removed", []Statement{acc}, nil, true, true},
		{"reject added", []Statement{acc}, []Statement{rej, acc}, true, true},
		{"reject removed", []Statement{rej, acc}, []Statement{acc}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, l := ChangedPeers(Policy{Export: tc.old}, Policy{Export: tc.new})
			if (len(c) == 1) != tc.changed || (len(l) == 1) != tc.losing {
				t.Errorf("changed %v losing %v, want changed=%v losing=%v", c, l, tc.changed, tc.losing)
			}
		})
	}
}
