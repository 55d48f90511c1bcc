package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/names"
)

// childBlock is what the BGP speaker in the child pod of
// TestLocalWorkloadPeering announces, and childAddr an address in it
// that the pod answers on.
var (
	childBlock = netip.MustParsePrefix("10.123.0.0/26")
	childAddr  = netip.MustParseAddr("10.123.0.1")
)

// TestLocalWorkloadPeering: a BGP speaker (BIRD 2) runs in a pod and
// peers with its own node, as Calico's local workload peering does: a
// BGPPeer's localWorkloadSelector selects the pod, felix puts
// BGPConfiguration localWorkloadPeeringIPV4 on the pod's host interface,
// the pod's BIRD connects to it, and the node learns what the pod
// announces. The node programs it through the pod and, through a BGPPeer
// whose filter exports it (as in Calico, routes learned from peers go to
// no other peer unless a BGPFilter says so) and nextHopMode Self, passes
// it to the other node: a pod there reaches an address behind the child.
// Deleting the BGPPeer takes the session, the route and the peering
// address away.
func TestLocalWorkloadPeering(t *testing.T) {
	bin, ctl, err := (&Lab{}).birdBinaries(RRBird2)
	if err != nil {
		t.Skip(err)
	}
	l := newLab(t, Options{Nodes: 2, Peering: PeeringMesh})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	peering := netip.MustParseAddr("169.254.0.179")
	if err := l.Apply(ctx, fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {defaultEndpointToHostAction: Accept}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {logSeverityScreen: Info, nodeToNodeMeshEnabled: true, asNumber: %d, localWorkloadPeeringIPV4: %s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: children}
spec: {localWorkloadSelector: "role == 'child'", asNumber: 65401}
---
# As Calico's own test of local peers: routes learned from peers go to
# other nodes only through a BGPPeer whose filter exports them, here with
# the node as their next hop.
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: export-children}
spec: {exportV4: [{action: Accept, matchOperator: In, cidr: %s, source: RemotePeers}]}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: nodes}
spec: {nodeSelector: all(), peerSelector: all(), filters: [export-children], nextHopMode: Self}
`, ClusterAS, peering, netip.MustParsePrefix("10.123.0.0/16"))); err != nil {
		t.Fatal(err)
	}
	node1, _ := l.Node("node1")
	child, err := l.AddPodWith(ctx, "node1", "kids", "child", PodOptions{Labels: map[string]string{"role": "child"}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := l.AddPod(ctx, "node1", "kids", "plain")
	if err != nil {
		t.Fatal(err)
	}
	far, err := l.AddPod(ctx, "node2", "kids", "far")
	if err != nil {
		t.Fatal(err)
	}
	iface := names.VethNameForWorkload(child.Namespace, child.Name)
	addrs := func(pod Pod) string {
		out, _ := run(ctx, "ip", "-n", node1.NS, "-4", "addr", "show", "dev", names.VethNameForWorkload(pod.Namespace, pod.Name))
		return out
	}
	waitFor := func(what string, timeout time.Duration, cond func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			ok, state := cond()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; last state:\n%s", what, state)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor("the peering address on the child's interface "+iface, 30*time.Second, func() (bool, string) {
		out := addrs(child)
		return strings.Contains(out, "inet "+peering.String()+"/32"), out
	})
	if out := addrs(plain); strings.Contains(out, "inet ") {
		t.Errorf("the peering address is on a pod no BGPPeer selects:\n%s", out)
	}

	// The child's BGP speaker: it announces childBlock and answers on
	// childAddr.
	if _, err := run(ctx, "ip", "-n", child.NS, "addr", "add", netip.PrefixFrom(childAddr, 32).String(), "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	dir := l.path("child-bird")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := dir + "/bird.conf"
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`router id %s;
protocol device { }
protocol static children { ipv4; route %s blackhole; }
protocol bgp parent {
  local as 65401;
  neighbor %s as %d;
  multihop;
  connect retry time 1; error wait time 1, 2;
  ipv4 { import all; export where proto = "children"; };
}
`, child.IP, childBlock, peering, ClusterAS)), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := dir + "/bird.ctl"
	p, err := start(child.NS, "bird/child", dir+"/bird.log", []string{bin, "-f", "-c", conf, "-s", sock}, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.recordProc("bird/child", p); err != nil {
		t.Fatal(err)
	}
	birdc := func(args ...string) string {
		out, _ := run(ctx, append([]string{ctl, "-s", sock}, args...)...)
		return out
	}
	waitFor("the child's session with node1", 60*time.Second, func() (bool, string) {
		out := birdc("show", "protocols", "parent")
		return strings.Contains(out, "Established"), out + tail(p.Log, 2000)
	})
	waitFor("node1's session with the child", 10*time.Second, func() (bool, string) {
		ss, err := l.Sessions(ctx, "node1")
		for _, s := range ss {
			if s.Peer == child.IP && s.AS == 65401 && s.Established() {
				return true, ""
			}
		}
		return false, fmt.Sprint(ss, err)
	})
	route := func(ns string) string {
		out, _ := run(ctx, "ip", "-n", ns, "route", "show", childBlock.String())
		return out
	}
	node2, _ := l.Node("node2")
	waitFor("node1's route to the child's block through the child", 30*time.Second, func() (bool, string) {
		out := route(node1.NS)
		return strings.Contains(out, "via "+child.IP.String()+" dev "+iface), out
	})
	waitFor("node2's route to the child's block through node1", 30*time.Second, func() (bool, string) {
		out := route(node2.NS)
		return strings.Contains(out, "via "+node1.IP.String()), out
	})
	if _, err := l.Ping(ctx, far.Key(), childAddr, 20*time.Second); err != nil {
		t.Errorf("a pod on node2 does not reach %s behind the child: %v", childAddr, err)
	}

	// The BGPPeer goes: so do the session, the routes and the address.
	if out, err := l.Calicoctl(ctx, "node1", nil, "delete", "bgppeer", "children"); err != nil {
		t.Fatalf("calicoctl delete: %v\n%s", err, out)
	}
	waitFor("the peering address removed", 30*time.Second, func() (bool, string) {
		out := addrs(child)
		return !strings.Contains(out, "inet "), out
	})
	waitFor("the child's block withdrawn on both nodes", 30*time.Second, func() (bool, string) {
		a, b := route(node1.NS), route(node2.NS)
		return a == "" && b == "", a + b
	})
}
