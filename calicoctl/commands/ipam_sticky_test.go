package commands_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/ipam"
)

// TestIPAMStickyReservations: sticky reservations count in ipam show
// (with who they are for), ipam check reports them as reserved rather
// than leaked, and a release from a check report leaves them alone.
func TestIPAMStickyReservations(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	ctx := context.Background()
	for _, r := range []struct{ ip, pod, policy, container string }{
		{"10.10.0.10", "db-0", "immutable", ""},
		{"10.10.0.11", "db-1", "never", "c11"},
	} {
		attrs := map[string]string{"namespace": "default", "pod": r.pod, ipam.AttrReleasePolicy: r.policy, ipam.AttrOwnerKind: "StatefulSet",
			ipam.AttrOwnerName: "db", ipam.AttrOwnerUID: "uid-db"}
		if r.container != "" {
			attrs[ipam.AttrContainer], attrs[ipam.AttrNode] = r.container, "node-b"
		}
		if err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr(r.ip), Hostname: "node-a", Attrs: attrs,
			HandleID: ipam.StickyHandleID("k8s-pod-network", "default", "StatefulSet", "db", r.pod)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"ipam-sticky-show.txt", []string{"ipam", "show"}},
		{"ipam-sticky-show-ip.txt", []string{"ipam", "show", "--ip=10.10.0.10"}},
		{"ipam-sticky-show-ip-used.txt", []string{"ipam", "show", "--ip=10.10.0.11"}},
		{"ipam-sticky-check-problem-ips.txt", []string{"ipam", "check", "--show-problem-ips"}},
	} {
		t.Run(tc.golden, func(t *testing.T) { golden(t, tc.golden, c.mustRun(t, "", tc.args...)) })
	}
	report := filepath.Join(t.TempDir(), "report.json")
	c.mustRun(t, "", "ipam", "check", "-o", report)
	out := c.mustRun(t, "", "ipam", "release", "--from-report="+report, "--force")
	if !strings.Contains(out, "Released") {
		t.Logf("release printed:\n%s", out)
	}
	for ip, wantHeld := range map[string]bool{"10.10.0.2": false, "10.10.0.10": true, "10.10.0.11": true} {
		_, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(ip))
		if held := err == nil; held != wantHeld {
			t.Errorf("after release from a report: %s held %t, want %t", ip, held, wantHeld)
		}
	}
}
