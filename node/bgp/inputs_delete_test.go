package bgp

import (
	"testing"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestInputsKeyOnlyDelete: a deletion that carries only the resource's
// key (what the etcd watcher reports for a deletion found by listing
// again after a compaction: kind, namespace, name, no spec) removes what
// the inputs held, and says so.
func TestInputsKeyOnlyDelete(t *testing.T) {
	pokes := 0
	in := newInputs(Config{NodeName: "n1", Log: log.NewEntry(log.StandardLogger())}, func() { pokes++ })
	node := &v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n2", ResourceVersion: "5"}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.2/24"}}}
	peer := &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "p", ResourceVersion: "6"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512}}
	cfg := &v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default", ResourceVersion: "7"}}
	wep := &v3.WorkloadEndpoint{ObjectMeta: v3.ObjectMeta{Name: "w", Namespace: "ns", ResourceVersion: "8"},
		Spec: v3.WorkloadEndpointSpec{Node: "n2", IPNATs: []v3.IPNAT{{InternalIP: "10.244.0.1", ExternalIP: "198.19.0.1"}}}}
	in.set(v3.KindNode, node, false)
	in.set(v3.KindBGPPeer, peer, false)
	in.set(v3.KindBGPConfiguration, cfg, false)
	in.set(v3.KindWorkloadEndpoint, wep, false)
	if len(in.res[v3.KindNode]) != 1 || len(in.res[v3.KindBGPPeer]) != 1 || len(in.res[v3.KindBGPConfiguration]) != 1 || len(in.weps) != 1 || pokes != 4 {
		t.Fatalf("after adding: nodes %d, peers %d, configs %d, endpoints %d, pokes %d; want 1, 1, 1, 1, 4",
			len(in.res[v3.KindNode]), len(in.res[v3.KindBGPPeer]), len(in.res[v3.KindBGPConfiguration]), len(in.weps), pokes)
	}
	in.set(v3.KindNode, &v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n2", ResourceVersion: "5"}}, true)
	in.set(v3.KindBGPPeer, &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "p", ResourceVersion: "6"}}, true)
	in.set(v3.KindBGPConfiguration, &v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default", ResourceVersion: "7"}}, true)
	in.set(v3.KindWorkloadEndpoint, &v3.WorkloadEndpoint{ObjectMeta: v3.ObjectMeta{Name: "w", Namespace: "ns", ResourceVersion: "8"}}, true)
	if len(in.res[v3.KindNode]) != 0 || len(in.res[v3.KindBGPPeer]) != 0 || len(in.res[v3.KindBGPConfiguration]) != 0 || len(in.weps) != 0 || pokes != 8 {
		t.Fatalf("after key-only deletions: nodes %d, peers %d, configs %d, endpoints %d, pokes %d; want 0, 0, 0, 0, 8",
			len(in.res[v3.KindNode]), len(in.res[v3.KindBGPPeer]), len(in.res[v3.KindBGPConfiguration]), len(in.weps), pokes)
	}
	// A deletion of what was never held changes nothing.
	in.set(v3.KindNode, &v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n9"}}, true)
	if pokes != 8 {
		t.Errorf("deleting an unknown node poked the speaker")
	}
}
