package bgp_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/names"
)

// TestFloatingIPAdvertised: with floatingIPs Enabled, a floating IP of a
// workload on n1 reaches a BIRD route reflector as a /32 from n1 only
// (n2 never advertises it); a BGPFilter export rule rejecting it
// withdraws it, and so do the workload going and floatingIPs Disabled.
func TestFloatingIPAdvertised(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	rrPeer := &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 64512}}
	f.apply(rrPeer)
	felixConf := func(floating string) {
		f.apply(&v3.FelixConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.FelixConfigurationSpec{FloatingIPs: floating}})
	}
	felixConf("Enabled")
	addrs := map[string]string{"n1": "198.18.0.1", "n2": "198.18.0.2"}
	rr := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, rrConf(false, addrs))
	blocks := f.startRRClients(rr, addrs)

	fip := netip.MustParsePrefix("10.244.250.9/32")
	wep := &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName("n1", "k8s", "web", "eth0"), Namespace: "default"},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "n1", Pod: "web", Endpoint: "eth0", InterfaceName: names.VethNameForWorkload("default", "web"),
			IPNetworks: []string{"10.244.251.1/32"}, IPNATs: []v3.IPNAT{{InternalIP: "10.244.251.1", ExternalIP: fip.Addr().String()}}},
	}
	// fromOnly waits until BIRD's routes for fip are exactly those of the
	// nodes named (none: withdrawn).
	fromOnly := func(what string, nodes ...string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() (bool, string) {
			out := rr.show("show", "route", fip.String(), "all")
			for _, n := range []string{"n1", "n2"} {
				want := strings.Contains(strings.Join(nodes, " "), n)
				if strings.Contains(out, " ["+n+" ") != want {
					return false, out
				}
			}
			if len(nodes) == 1 && !strings.Contains(out, "BGP.next_hop: "+addrs[nodes[0]]) {
				return false, out
			}
			return true, out
		})
	}
	// never checks, for a while, that n2 never advertises fip.
	never := func() {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if out := rr.show("show", "route", fip.String(), "all"); strings.Contains(out, " [n2 ") {
				t.Fatalf("n2 advertises n1's floating IP:\n%s", out)
			}
		}
	}
	f.apply(wep)
	fromOnly("the floating IP from n1", "n1")
	never()

	// A BGPFilter rejecting it on export withdraws it; without the
	// filter it is back.
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "no-fip"}, Spec: v3.BGPFilterSpec{ExportV4: []v3.BGPFilterRuleV4{
		{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorEqual, CIDR: fip.String()},
	}}})
	rrPeer.Spec.Filters = []string{"no-fip"}
	rrPeer.ResourceVersion = ""
	f.apply(rrPeer)
	fromOnly("the floating IP rejected by the BGPFilter")
	rr.waitHas(blocks["n1"], true)
	rrPeer.Spec.Filters = nil
	f.apply(rrPeer)
	fromOnly("the floating IP back without the filter", "n1")

	// The workload goes: withdrawn.
	if _, err := f.store.Delete(context.Background(), datastore.KeyOf(wep), ""); err != nil {
		t.Fatal(err)
	}
	fromOnly("the floating IP withdrawn with its workload")

	// Back, then floatingIPs Disabled: withdrawn.
	wep.ResourceVersion = ""
	f.apply(wep)
	fromOnly("the floating IP back with its workload", "n1")
	felixConf("Disabled")
	fromOnly("the floating IP withdrawn with floatingIPs Disabled")
	never()
}
