package bgp_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	fnstest "github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// TestHostLocalWorkload: a pod whose address came from host-local IPAM
// (no Calico IPAM block holds it) is advertised by its node as a host
// route, as Calico's BIRD exports felix's route to it: the other node
// learns it and a real packet reaches the pod across the nodes (a TCP connection from the other node); once its
// WorkloadEndpoint is gone the route is withdrawn.
func TestHostLocalWorkload(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	// The pod on n1, plumbed as the CNI plugin and felix would.
	pod := f.lab.NS("pod")
	f.lab.Run("ip", "-n", f.ns["n1"], "link", "add", "cali1", "type", "veth", "peer", "name", "eth0", "netns", pod)
	f.lab.Run("ip", "-n", pod, "addr", "add", "10.244.200.5/32", "dev", "eth0")
	f.lab.Run("ip", "-n", pod, "link", "set", "eth0", "up")
	f.lab.Run("ip", "-n", pod, "route", "add", "169.254.1.1", "dev", "eth0")
	f.lab.Run("ip", "-n", pod, "route", "add", "default", "via", "169.254.1.1")
	f.lab.Run("ip", "-n", f.ns["n1"], "link", "set", "cali1", "up")
	// The pods' gateway answers on the node (as the lab does).
	f.lab.Run("ip", "-n", f.ns["n1"], "addr", "add", "169.254.1.1/32", "dev", "lo")
	f.lab.Run("ip", "netns", "exec", f.ns["n1"], "sysctl", "-qw", "net.ipv4.conf.cali1.proxy_arp=1", "net.ipv4.ip_forward=1")
	f.lab.Run("ip", "-n", f.ns["n1"], "route", "add", "10.244.200.5/32", "dev", "cali1", "scope", "link")
	wep := &v3.WorkloadEndpoint{ObjectMeta: v3.ObjectMeta{Name: "n1-k8s-pod-eth0", Namespace: "default"},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "n1", Pod: "pod", Endpoint: "eth0", InterfaceName: "cali1",
			IPNetworks: []string{"10.244.200.5/32"}}}
	f.apply(wep)
	f.start("n1")
	f.start("n2")
	f.waitRoute(f.ns["n2"], netip.MustParsePrefix("10.244.200.5/32"), "198.18.0.1")
	srv, err := fnstest.Serve(fnstest.Runner(t, fnstest.NS{Name: pod}), 8080)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	from := fnstest.Runner(t, fnstest.NS{Name: f.ns["n2"]})
	eventually(t, 10*time.Second, "n2 connects to the pod on n1", func() (bool, string) {
		seen, err := fnstest.TCP(from, netip.MustParseAddr("10.244.200.5"), 8080)
		return err == nil, fmt.Sprint(seen, err)
	})
	if _, err := f.store.Delete(t.Context(), datastore.KeyOf(wep), ""); err != nil {
		t.Fatal(err)
	}
	f.waitRoute(f.ns["n2"], netip.MustParsePrefix("10.244.200.5/32"), "")
}
