package bgp_test

import (
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestReachableBy: n1's BGPPeer names the gateway through which BIRD is
// reached (reachableBy 198.18.0.251, a router namespace). n1 routes
// BIRD's address through it, as Calico does with a static route toward
// the peer, and keeps doing so when BIRD advertises a more specific route
// to its own address through a dead next hop: without the static route
// n1 would install that route and cut its own session. Dropping
// reachableBy removes the route.
func TestReachableBy(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	peer := &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{
		Node: "n1", PeerIP: "198.18.0.250", ASNumber: 64512, ReachableBy: "198.18.0.251"}}
	f.apply(peer)
	gw := f.addNS("gw", "198.18.0.251/24")
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"} {
		f.lab.Run("ip", "netns", "exec", gw, "sysctl", "-qw", s)
	}
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
# A route to BIRD's own address through a next hop that does not answer.
protocol static { ipv4; route 198.18.0.250/32 via 198.18.0.253; }
protocol bgp n1 {
  local 198.18.0.250 as 64512; neighbor 198.18.0.1 as 64512; rr client;
  connect retry time 1; error wait time 1, 2; hold time 3; keepalive time 1;
  ipv4 { import all; export filter { if net = 198.18.0.250/32 then bgp_next_hop = 198.18.0.253; accept; }; };
}
`)
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	f.start("n1")
	b.waitHas(blk, true)
	eventually(t, 20*time.Second, "n1 routes BIRD's address through the gateway", func() (bool, string) {
		out := f.ours(f.ns["n1"], "198.18.0.250/32")
		return strings.Contains(out, "198.18.0.250 via 198.18.0.251"), out
	})
	// The session holds (its hold time is 3 s): the route BIRD sends for
	// its own address never replaces the one through the gateway.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if !b.established("n1") {
			t.Fatalf("the session went down:\n%s", b.show("show", "protocols", "all", "n1"))
		}
		if out := f.ours(f.ns["n1"], "198.18.0.250/32"); !strings.Contains(out, "via 198.18.0.251") {
			t.Fatalf("n1's route to BIRD changed: %q", out)
		}
		time.Sleep(300 * time.Millisecond)
	}

	peer.Spec.ReachableBy = ""
	f.apply(peer)
	eventually(t, 20*time.Second, "the route through the gateway removed", func() (bool, string) {
		out := f.ours(f.ns["n1"], "198.18.0.250/32")
		return !strings.Contains(out, "via 198.18.0.251"), out
	})
}
