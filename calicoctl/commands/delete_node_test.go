package commands_test

import (
	"context"
	"strings"
	"testing"
)

// TestDeleteNodeCascades deletes node-a of the IPAM fixture through the
// binary and checks that its endpoint's address, endpoint, affinity,
// BGPPeer and node.node-a configurations went with it, and nothing of
// node-b's.
func TestDeleteNodeCascades(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	c.mustRun(t, `apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: peer-a}
spec: {node: node-a, peerIP: 198.18.0.1, asNumber: 64600}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: peer-b}
spec: {node: node-b, peerIP: 198.18.0.2, asNumber: 64600}
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node-a}
spec: {}
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: node.node-a}
spec: {}
`, "apply", "-f", "-")
	if out := c.mustRun(t, "", "delete", "node", "node-a"); out != "Successfully deleted 1 'Node' resource(s)\n" {
		t.Errorf("delete printed %q", out)
	}
	for _, tc := range []struct{ kind, want string }{
		{"nodes", "node.projectcalico.org/node-b\n"},
		{"bgppeers", "bgppeer.projectcalico.org/peer-b\n"},
		{"felixconfigurations", ""},
		{"bgpconfigurations", ""},
	} {
		if got := c.mustRun(t, "", "get", tc.kind, "-o", "name"); got != tc.want {
			t.Errorf("get %s: %q, want %q", tc.kind, got, tc.want)
		}
	}
	weps := c.mustRun(t, "", "get", "wep", "-A", "-o", "name")
	if strings.Contains(weps, "node--a-") || !strings.Contains(weps, "node--b-k8s-api--1-eth0") {
		t.Errorf("endpoints after deleting node-a: %q", weps)
	}
	// node-a's block keeps the leaked 10.10.0.2 and node-b's borrowed
	// 10.10.0.5 but loses its affinity; 10.10.0.1 is free.
	golden(t, "node-delete-ipam-blocks.txt", c.mustRun(t, "", "ipam", "show", "--show-blocks"))
	affs, err := alloc.ListAffinities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range affs {
		if a.Host == "node-a" {
			t.Errorf("node-a still has affinity to %s", a.CIDR)
		}
	}
	if r := c.run(t, "", nil, "ipam", "show", "--ip=10.10.0.1"); !strings.Contains(r.stdout, "IP 10.10.0.1 is not currently assigned") {
		t.Errorf("10.10.0.1 after deleting its node: %q %q", r.stdout, r.stderr)
	}
	r := c.run(t, "", nil, "delete", "node", "node-a")
	if r.code != 1 || !strings.Contains(r.stderr, "resource does not exist: Node(node-a)") {
		t.Errorf("second delete: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := c.mustRun(t, "", "delete", "node", "node-a", "--skip-not-exists"); out != "Successfully deleted 1 'Node' resource(s)\n" {
		t.Errorf("delete --skip-not-exists printed %q", out)
	}
}
