package lab

import (
	"context"
	"net/netip"
	"testing"
)

// TestHostLocalPods: pods addressed by host-local IPAM (no Calico IPAM
// block holds their addresses) are reachable across nodes, as in Calico:
// over BGP each node advertises its pods' host routes (an IPPool covers
// the ranges); over the VXLAN backend felix routes each pod address with
// FelixConfiguration routeSource WorkloadIPs.
func TestHostLocalPods(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  Options
		pool  string // the host-local pool's spec fields
		felix string
	}{
		{"bgp", Options{Nodes: 3, HostLocal: true}, "vxlanMode: Never", ""},
		{"vxlan", Options{Nodes: 3, Backend: BackendVXLAN, HostLocal: true}, "vxlanMode: Always", "routeSource: WorkloadIPs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, c.opts)
			ctx := context.Background()
			// The pool of the host-local ranges; nodeSelector !all()
			// keeps calico-ipam out of it.
			y := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: host-local}
spec: {cidr: 10.70.0.0/16, nodeSelector: "!all()", ` + c.pool + `}
`
			if c.felix != "" {
				y += `---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {` + c.felix + `}
`
			}
			if err := l.Apply(ctx, y); err != nil {
				t.Fatal(err)
			}
			pods := addPods(t, l, "default", 1)
			for _, p := range pods {
				n, _ := l.Node(p.Node)
				if want := netip.MustParsePrefix(HostLocalSubnet(n.Index)); !want.Contains(p.IP) {
					t.Fatalf("pod %s has %s, not from host-local's %s", p.Key(), p.IP, want)
				}
			}
			requireReachable(t, l, "host-local pods, "+c.name)
		})
	}
}
