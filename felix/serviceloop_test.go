package felix

import (
	"net/netip"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// TestServiceLoopPrevention: a pod connects to an address of an
// advertised service range that no Service translates (no kube-proxy
// here); the node routes the range to the outside host, which answers
// at that address, standing for a router that would send it back. As
// Calico's serviceLoopPrevention (Drop by default), the node drops the
// forwarded packet once BGPConfiguration advertises the range; Reject
// refuses it at once; Disabled lets it through again.
func TestServiceLoopPrevention(t *testing.T) {
	for _, dp := range dataplanes {
		t.Run(dp, func(t *testing.T) {
			c := newCluster(t, dp)
			config := c.applyFelixConfig
			c.node.MustRun(t, "ip", "route", "add", "10.96.0.0/12", "via", extAddr.String())
			c.ext.MustRun(t, "ip", "addr", "add", "10.96.0.50/32", "dev", "lo")
			p := c.addPod("ns-a", "client", "10.65.0.10", map[string]string{"app": "client"}, "sa-x")
			svc := netip.MustParseAddr("10.96.0.50")
			reach := func(what string, want bool) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					_, err := nstest.TCP(p.run, svc, extPorts[0])
					if (err == nil) == want {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: pod→%s:%d reached %v, want %v (%v)", what, svc, extPorts[0], err == nil, want, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			reach("no service range advertised", true)
			rs := c.apply(`apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec:
  serviceClusterIPs: [{cidr: 10.96.0.0/12}]
`)
			reach("serviceClusterIPs advertised", false)
			config("  serviceLoopPrevention: Disabled\n")
			reach("serviceLoopPrevention Disabled", true)
			config("  serviceLoopPrevention: Reject\n")
			reach("serviceLoopPrevention Reject", false)
			c.remove(rs)
			reach("service range withdrawn", true)
		})
	}
}
