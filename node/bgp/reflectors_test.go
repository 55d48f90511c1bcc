package bgp_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// gobgpJSON runs the gobgp CLI against a node's speaker and decodes its
// JSON output into v.
func (f *fabric) gobgpJSON(node string, v any, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", f.ns[node], "gobgp", "-p", "50051"}, append(args, "-j")...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gobgp %s on %s: %v: %s", strings.Join(args, " "), node, err, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("gobgp %s on %s: %v: %s", strings.Join(args, " "), node, err, out)
	}
	return nil
}

// ribPath is one path of `gobgp global rib -j`.
type ribPath struct {
	Source string            `json:"neighbor-ip"`
	Attrs  []json.RawMessage `json:"attrs"`
}

// originator is the path's ORIGINATOR_ID, "" when it has none.
func (p ribPath) originator() string {
	for _, a := range p.Attrs {
		var at struct {
			Type  int    `json:"type"`
			Value string `json:"value"`
		}
		if json.Unmarshal(a, &at) == nil && at.Type == 9 {
			return at.Value
		}
	}
	return ""
}

// paths lists a node's paths for pfx.
func (f *fabric) paths(node string, pfx netip.Prefix) ([]ribPath, error) {
	var rib map[string][]ribPath
	if err := f.gobgpJSON(node, &rib, "global", "rib", "-a", "ipv4", pfx.String()); err != nil {
		return nil, err
	}
	return rib[pfx.String()], nil
}

// TestInClusterRRPair: two in-cluster route reflectors sharing a cluster
// ID, as Calico advises, the second made a reflector after the nodes run
// (as the lab and an operator labelling nodes do). Each reflector then
// treats the other as a reflector of its own cluster, not a client, and
// learns each client's block from that client alone, never through the
// other reflector: so what one reflector tells the clients never depends
// on the other (a restart of one used to make the other change and
// withdraw client routes, and the clients lost traffic). Each client gets
// each other client's block from both reflectors, originated by that
// client.
func TestInClusterRRPair(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-route-reflectors"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"}})
	reflector := func(n *v3.Node) {
		n.Labels = map[string]string{"route-reflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	}
	// The lab's addresses: the clients' router IDs are higher than the
	// reflectors', so a client's block reflected by the other reflector
	// wins GoBGP's tie-break over the client's own path.
	addrs := map[string]string{"rr1": "198.18.0.11", "rr2": "198.18.0.12", "n3": "198.18.0.13", "n4": "198.18.0.14"}
	f.node("rr1", addrs["rr1"]+"/24", reflector)
	f.node("rr2", addrs["rr2"]+"/24", nil)
	f.node("n3", addrs["n3"]+"/24", nil)
	f.node("n4", addrs["n4"]+"/24", nil)
	blocks := map[string]netip.Prefix{}
	for _, n := range []string{"rr1", "rr2", "n3", "n4"} {
		blocks[n] = f.block(n)
		f.start(n)
	}
	// rr2 is a client of rr1 first.
	f.waitRoute(f.ns["rr2"], blocks["n3"], addrs["n3"])
	f.node2(&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "rr2"}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: addrs["rr2"] + "/24"}}}, reflector)
	for _, c := range []string{"n3", "n4"} {
		for _, rr := range []string{"rr1", "rr2"} {
			f.waitRoute(f.ns[rr], blocks[c], addrs[c])
		}
	}

	settled := func() (bool, string) {
		var state strings.Builder
		ok := true
		for rr, other := range map[string]string{"rr1": "rr2", "rr2": "rr1"} {
			var ns []struct {
				Conf struct {
					Address string `json:"neighbor_address"`
				} `json:"conf"`
				RR struct {
					Client bool `json:"route_reflector_client"`
				} `json:"route_reflector"`
			}
			if err := f.gobgpJSON(rr, &ns, "neighbor"); err != nil {
				return false, err.Error()
			}
			for _, n := range ns {
				if n.Conf.Address == addrs[other] && n.RR.Client {
					ok = false
					fmt.Fprintf(&state, "%s treats %s as a route-reflector client\n", rr, other)
				}
			}
			for _, c := range []string{"n3", "n4"} {
				ps, err := f.paths(rr, blocks[c])
				if err != nil {
					return false, err.Error()
				}
				if len(ps) != 1 || ps[0].Source != addrs[c] {
					ok = false
					fmt.Fprintf(&state, "%s has %d path(s) for %s's block %s, want one from %s: %+v\n", rr, len(ps), c, blocks[c], addrs[c], ps)
				}
			}
		}
		for c, other := range map[string]string{"n3": "n4", "n4": "n3"} {
			ps, err := f.paths(c, blocks[other])
			if err != nil {
				return false, err.Error()
			}
			from := map[string]string{}
			for _, p := range ps {
				from[p.Source] = p.originator()
			}
			for _, rr := range []string{"rr1", "rr2"} {
				if o, has := from[addrs[rr]]; !has || o != addrs[other] {
					ok = false
					fmt.Fprintf(&state, "%s's path for %s's block %s from %s: present %v, originator %q, want %s\n", c, other, blocks[other], rr, has, o, addrs[other])
				}
			}
		}
		return ok, state.String()
	}
	what := "the reflectors peering as reflectors of one cluster, each client's block learned from that client alone"
	eventually(t, 30*time.Second, what, settled)
	// And it lasts: a reflection from the other reflector arrives a
	// moment after the client's own path.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if ok, state := settled(); !ok {
			t.Fatalf("%s, then no longer:\n%s", what, state)
		}
	}
}

// node2 writes a Node again, changed by mutate.
func (f *fabric) node2(n *v3.Node, mutate func(*v3.Node)) {
	f.t.Helper()
	mutate(n)
	f.apply(n)
}
