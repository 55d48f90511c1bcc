package felix

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestInterfaceRefreshInterval: a host endpoint named only by its
// expectedIPs gets its interface once that interface holds the address,
// found by the interface rescan every interfaceRefreshInterval even when
// nothing else makes felix apply (every other periodic refresh is off
// here). Without the rescan the address would be found only at the next
// unrelated apply, a minute or more later.
func TestInterfaceRefreshInterval(t *testing.T) {
	c := newCluster(t, "NFT")
	c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: %s
  ipv6Support: false
  iptablesRefreshInterval: 0s
  ipsetsRefreshInterval: 0s
  routeRefreshInterval: 0s
  interfaceRefreshInterval: 1s
`, c.backend))
	c.node.MustRun(t, "ip", "link", "add", "eth-late", "type", "veth", "peer", "name", "eth-latep")
	c.apply(`apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-named}
spec: {node: node-a, interfaceName: eth-named}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-late}
spec: {node: node-a, expectedIPs: [198.18.1.3]}
`)
	// The apply that took both endpoints has run: eth-late held no
	// expected address then.
	c.waitFor("the host endpoint chain of eth-named", func() bool { return strings.Contains(c.filter(), ":cali-fh-eth-named ") })
	if strings.Contains(c.filter(), "eth-late") {
		t.Fatalf("eth-late got host endpoint rules before it held 198.18.1.3:\n%s", c.filter())
	}
	c.node.MustRun(t, "ip", "addr", "add", "198.18.1.3/32", "dev", "eth-late")
	start := time.Now()
	c.waitFor("the host endpoint chain of eth-late", func() bool { return strings.Contains(c.filter(), ":cali-fh-eth-late ") })
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("eth-late's host endpoint was programmed %v after its address appeared, want within interfaceRefreshInterval (1s) and an apply", took)
	}
	t.Logf("programmed %v after the address appeared", time.Since(start).Round(time.Millisecond))
}
