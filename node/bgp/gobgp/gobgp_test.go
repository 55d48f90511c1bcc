package gobgp

import (
	"context"
	"net/netip"
	"testing"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// reflectorOf returns GoBGP's route-reflector settings of a neighbour.
func reflectorOf(t *testing.T, r *Router, addr string) (client bool, clusterID string) {
	t.Helper()
	found := false
	err := r.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: addr}, func(p *api.Peer) {
		found = true
		client = p.GetRouteReflector().GetRouteReflectorClient()
		clusterID = p.GetRouteReflector().GetRouteReflectorClusterId()
	})
	if err != nil || !found {
		t.Fatalf("neighbour %s: found %v, %v", addr, found, err)
	}
	return client, clusterID
}

// TestUpdatePeerReflectorRole: a session whose route-reflector role
// changes (the peer joined this node's cluster, or left it, or the cluster
// ID changed) has the new role in GoBGP after UpdatePeer, which GoBGP's
// own UpdatePeer leaves as it was.
func TestUpdatePeerReflectorRole(t *testing.T) {
	ctx := context.Background()
	r := New("", nil)
	// No listener, a passive session to a loopback address: nothing is
	// sent anywhere.
	if err := r.Start(ctx, router.Global{AS: 64512, RouterID: netip.MustParseAddr("198.18.0.11"), ListenPort: -1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	p := peers.Peer{Address: netip.MustParseAddr("127.0.0.2"), AS: 64512, LocalAS: 64512, Type: peers.TypeGlobal, Passive: true, Node: "rr-2",
		RRClient: true, ClusterID: "224.0.0.1", RestartTime: peers.DefaultRestartTime}
	if err := r.AddPeer(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name      string
		client    bool
		clusterID string
	}{
		{"the peer joined the cluster", false, ""},
		{"the peer left it", true, "224.0.0.1"},
		{"the cluster ID changed", true, "224.0.0.2"},
		{"unchanged", true, "224.0.0.2"},
	} {
		p.RRClient, p.ClusterID = step.client, step.clusterID
		if err := r.UpdatePeer(ctx, p); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		client, id := reflectorOf(t, r, p.Address.String())
		if client != step.client || (step.client && id != step.clusterID) {
			t.Errorf("%s: GoBGP has client %v cluster ID %q, want client %v cluster ID %q", step.name, client, id, step.client, step.clusterID)
		}
	}
}
