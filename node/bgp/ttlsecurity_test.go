package bgp_test

import (
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestTTLSecurity: BIRD runs GTSM (`ttl security on`) towards two nodes.
// n1's BGPPeer has ttlSecurity 1: its packets leave with TTL 255, the
// session comes up and BIRD learns its block. n2's BGPPeer has none: BIRD
// drops its packets (TTL 64) and the session stays down, until
// ttlSecurity is added to that BGPPeer too.
func TestTTLSecurity(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	one := uint8(1)
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	peer := func(node string, ttl *uint8) *v3.BGPPeer {
		return &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr-" + node}, Spec: v3.BGPPeerSpec{
			Node: node, PeerIP: "198.18.0.250", ASNumber: 64512, TTLSecurity: ttl,
		}}
	}
	f.apply(peer("n1", &one))
	f.apply(peer("n2", nil))
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
template bgp nodes {
  local 198.18.0.250 as 64512; rr client; ttl security on;
  # A failing session retries in seconds, not BIRD's default minutes. A
  # connection whose packets from the node are dropped stays in OpenSent
  # until the startup hold time ends (240 s by default), or in
  # OpenConfirm (when the node's OPEN slipped in before BIRD set the
  # accepted socket's minimum TTL) until the hold time ends.
  connect retry time 1; error wait time 1, 2; startup hold time 3;
  hold time 3; keepalive time 1;
  ipv4 { import all; export all; };
}
protocol bgp n1 from nodes { neighbor 198.18.0.1 as 64512; }
protocol bgp n2 from nodes { neighbor 198.18.0.2 as 64512; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	f.start("n1")
	f.start("n2")

	b.waitHas(b1, true)
	// n1 is up; n2 is not, and stays so.
	b.staysDown("n2", b2, "without TTL security towards a GTSM peer")

	// ttlSecurity added to n2's BGPPeer: the session is made again with
	// it and comes up.
	f.apply(peer("n2", &one))
	b.waitHas(b2, true)
	if !b.established("n1") || !b.established("n2") {
		t.Errorf("sessions not both Established:\n%s", b.show("show", "protocols"))
	}
}

// TestTTLSecurityAccepted: BIRD runs GTSM and dials in (n1 cannot dial
// out); the session comes up only if the connection n1 accepts sends
// with TTL 255 and checks BIRD's.
func TestTTLSecurityAccepted(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	one := uint8(1)
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512, TTLSecurity: &one}})
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol bgp n1 { local 198.18.0.250 as 64512; neighbor 198.18.0.1 as 64512; rr client; ttl security on;
  connect retry time 1; error wait time 1, 2; startup hold time 3; hold time 3; keepalive time 1;
  ipv4 { import all; export all; }; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	f.noDial("n1")
	f.start("n1")
	b.waitHas(blk, true)
}
