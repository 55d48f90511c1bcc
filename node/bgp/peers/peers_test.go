package peers

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
)

var update = flag.Bool("update", false, "rewrite the golden files")

// loadTopology reads a topology file into an Input (without NodeName).
func loadTopology(t *testing.T, path string) Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := v3.Decode(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var in Input
	for _, r := range rs {
		switch o := r.(type) {
		case *v3.Node:
			in.Nodes = append(in.Nodes, *o)
		case *v3.BGPPeer:
			in.Peers = append(in.Peers, *o)
		case *v3.BGPConfiguration:
			in.Config = &o.Spec
		case *v3.WorkloadEndpoint:
			in.Workloads = append(in.Workloads, *o)
		default:
			t.Fatalf("%s: unexpected %T", path, r)
		}
	}
	in.Password = func(ref v3.SecretKeySelector) (string, bool) {
		if ref.Name == "bgp-secrets" {
			return "pw-" + ref.Key, true
		}
		return "", false
	}
	return in
}

// TestGolden computes every node's peers in every topology under testdata
// and compares them with testdata/<topology>.golden.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no topologies: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			in := loadTopology(t, f)
			var buf bytes.Buffer
			for _, n := range in.Nodes {
				in.NodeName = n.Name
				res, errs := Compute(in)
				if len(errs) > 0 {
					t.Fatalf("node %q: %v", n.Name, errs)
				}
				out, err := json.MarshalIndent(res, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&buf, "# node %s\n%s\n", n.Name, out)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(want, buf.Bytes()) {
				t.Errorf("%s differs from the computed peers:\n%s", golden, buf.String())
			}
		})
	}
}

// TestRules checks individual rules, independent of the golden files.
func TestRules(t *testing.T) {
	in := loadTopology(t, "testdata/incluster-rr.yaml")
	tests := []struct {
		node     string
		peer     string
		rrClient bool
		present  bool
	}{
		{"rr-1", "198.18.0.1", true, true},   // client of the RR
		{"rr-1", "198.18.0.12", false, true}, // same cluster ID: not a client
		{"rr-1", "198.18.0.11", false, false},
		{"node-a", "198.18.0.11", false, true},
		{"node-a", "198.18.0.2", false, false}, // no mesh
	}
	for _, tt := range tests {
		t.Run(tt.node+"->"+tt.peer, func(t *testing.T) {
			in.NodeName = tt.node
			res, errs := Compute(in)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			want := netip.MustParseAddr(tt.peer)
			var found *Peer
			for i := range res.Peers {
				if res.Peers[i].Address == want {
					found = &res.Peers[i]
				}
			}
			if (found != nil) != tt.present {
				t.Fatalf("node %s: session to %s present=%v, want %v", tt.node, tt.peer, found != nil, tt.present)
			}
			if found != nil && found.RRClient != tt.rrClient {
				t.Errorf("node %s: session to %s rrClient=%v, want %v", tt.node, tt.peer, found.RRClient, tt.rrClient)
			}
		})
	}
}

// TestInvalidSkipped checks a bad BGPPeer is reported and does not stop the
// mesh.
func TestInvalidSkipped(t *testing.T) {
	in := loadTopology(t, "testdata/mesh.yaml")
	in.NodeName = "node-a"
	in.Peers = append(in.Peers, v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "bad"}, Spec: v3.BGPPeerSpec{PeerIP: "10.0.0.300"}})
	res, errs := Compute(in)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `bgppeer "bad": spec.peerIP "10.0.0.300"`) {
		t.Fatalf("errors = %v, want one naming bgppeer \"bad\"", errs)
	}
	if len(res.Peers) != 3 {
		t.Fatalf("got %d peers, want the 3 mesh sessions: %+v", len(res.Peers), res.Peers)
	}
}

// TestKeepNextHop checks both spellings of "keep the original next hop".
func TestKeepNextHop(t *testing.T) {
	keep, self, auto := v3.NextHopKeep, v3.NextHopSelf, v3.NextHopAuto
	tests := []struct {
		name   string
		legacy bool
		mode   *v3.NextHopMode
		want   bool
	}{
		{"unset", false, nil, false},
		{"keepOriginalNextHop", true, nil, true},
		{"nextHopMode Keep", false, &keep, true},
		{"nextHopMode Auto", false, &auto, false},
		{"nextHopMode Self", false, &self, false},
		{"both", true, &auto, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := loadTopology(t, "testdata/mesh.yaml")
			in.NodeName = "node-a"
			in.Peers = []v3.BGPPeer{{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{
				PeerIP: "198.19.0.1", ASNumber: 65001, KeepOriginalNextHop: tt.legacy, NextHopMode: tt.mode,
			}}}
			res, errs := Compute(in)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			for _, p := range res.Peers {
				if p.Address == netip.MustParseAddr("198.19.0.1") {
					if p.KeepOriginalNextHop != tt.want {
						t.Errorf("keepOriginalNextHop = %v, want %v", p.KeepOriginalNextHop, tt.want)
					}
					return
				}
			}
			t.Fatalf("no session to 198.19.0.1: %+v", res.Peers)
		})
	}
}

// TestPasswords resolves an inline password and a secret reference (found
// and missing) into the sessions' TCP MD5 passwords.
func TestPasswords(t *testing.T) {
	node := v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n1"}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.1/24"}}}
	peer := func(name, ip string, pw *v3.BGPPassword) v3.BGPPeer {
		return v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.BGPPeerSpec{PeerIP: ip, ASNumber: 65001, Password: pw}}
	}
	in := Input{NodeName: "n1", Nodes: []v3.Node{node}, Peers: []v3.BGPPeer{
		peer("inline", "198.18.0.250", &v3.BGPPassword{Value: "s3cret"}),
		peer("secret", "198.18.0.251", &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp", Key: "rr"}}),
		peer("missing", "198.18.0.252", &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp", Key: "gone"}}),
		peer("none", "198.18.0.253", nil),
	}, Password: func(ref v3.SecretKeySelector) (string, bool) {
		if ref.Key == "rr" {
			return "from-file", true
		}
		return "", false
	}}
	res, errs := Compute(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := map[string][2]string{
		"198.18.0.250": {"s3cret", "inline"},
		"198.18.0.251": {"from-file", "bgp/rr"},
		"198.18.0.252": {"", "bgp/gone"},
		"198.18.0.253": {"", ""},
	}
	if len(res.Peers) != len(want) {
		t.Fatalf("%d peers, want %d: %+v", len(res.Peers), len(want), res.Peers)
	}
	for _, p := range res.Peers {
		w := want[p.Address.String()]
		if p.Password != w[0] || p.PasswordRef != w[1] {
			t.Errorf("peer %s: password %q ref %q, want %q %q", p.Address, p.Password, p.PasswordRef, w[0], w[1])
		}
	}
}

// TestIgnored: every BGPPeer field is acted on now, so a peer using them
// all has nothing to say.
func TestIgnored(t *testing.T) {
	self, keep, manual := v3.NextHopSelf, v3.NextHopKeep, v3.ReversePeeringManual
	one := uint8(1)
	for _, bp := range []v3.BGPPeer{
		{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{
			PeerIP: "198.18.0.250", ASNumber: 65001, ReachableBy: "198.18.0.254", Filters: []string{"no-default"}, NextHopMode: &self}},
		{ObjectMeta: v3.ObjectMeta{Name: "children"}, Spec: v3.BGPPeerSpec{LocalWorkloadSelector: "app == 'router'", ASNumber: 65001}},
		{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{
			PeerIP: "198.18.0.250", ASNumber: 65001, TTLSecurity: &one, NextHopMode: &keep, KeepOriginalNextHop: true,
			ReversePeering: &manual, Filters: []string{"no-default"}}},
	} {
		if notes := Ignored(bp); len(notes) > 0 {
			t.Errorf("BGPPeer %s, with only fields acted on: %v", bp.Name, notes)
		}
	}
}

// TestOneDialerPerPair: in every topology, of each session between two
// nodes configured on both ends, exactly one end connects. (With
// reversePeering Manual the other end may have no session at all, and
// then it refuses the connection whichever end would make it.)
func TestOneDialerPerPair(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in := loadTopology(t, f)
			sessions := map[[2]string]Peer{} // (node, peer node) → session
			for _, n := range in.Nodes {
				in.NodeName = n.Name
				res, _ := Compute(in)
				for _, p := range res.Peers {
					if p.Node != "" {
						sessions[[2]string{n.Name + "/" + p.SourceAddress.String(), p.Node + "/" + p.Address.String()}] = p
					}
				}
			}
			for k, p := range sessions {
				back, ok := sessions[[2]string{k[1], k[0]}]
				if !ok {
					continue
				}
				if p.Passive == back.Passive {
					t.Errorf("%s ↔ %s: passive %v on both ends", k[0], k[1], p.Passive)
				}
			}
		})
	}
}
