package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/palisade-net/palisade/node/bgp/router"
	"github.com/palisade-net/palisade/node/status"
)

func TestPeerRow(t *testing.T) {
	now := time.Date(2024, 5, 1, 15, 0, 0, 0, time.Local)
	at := time.Date(2024, 5, 1, 14, 1, 2, 0, time.Local)
	for _, tc := range []struct {
		name string
		in   router.PeerState
		want status.PeerStatus
	}{
		{"established", router.PeerState{Address: netip.MustParseAddr("198.18.0.2"), Description: "node-to-node mesh", State: "Established", Since: at, Reason: "stale"},
			status.PeerStatus{Address: "198.18.0.2", Type: "node-to-node mesh", State: "up", Since: "14:01:02", Info: "Established"}},
		{"down without a known reason", router.PeerState{Address: netip.MustParseAddr("198.18.0.3"), Description: "global", State: "Active"},
			status.PeerStatus{Address: "198.18.0.3", Type: "global", State: "start", Info: "Active"}},
		{"local error", router.PeerState{Address: netip.MustParseAddr("fd00::3"), Description: "global", State: "Active",
			Reason: "Local error: setting the TCP MD5 password on the BGP listener: protocol not available"},
			status.PeerStatus{Address: "fd00::3", Type: "global", State: "start", IPv6: true,
				Info: "Active Local error: setting the TCP MD5 password on the BGP listener: protocol not available"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := peerRow(tc.in, now); got != tc.want {
				t.Errorf("peerRow = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRouteProtocol(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint8
		err  bool
	}{{"", 0, false}, {"201", 201, false}, {"5", 5, false}, {"255", 255, false}, {"4", 0, true}, {"0", 0, true}, {"256", 0, true}, {"80", 0, true}, {"bgp", 0, true}} {
		got, err := routeProtocol(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("routeProtocol(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
