package felix

import (
	"strings"
)

// checkBPFEnforces checks that the eBPF dataplane, not iptables, holds
// the node's policy: every pod's interface has a workload entry with both
// normal stages, and felix's filter chains are only the guard.
func (c *cluster) checkBPFEnforces() {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	ifs, err := v.Interfaces()
	if err != nil {
		c.t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, in := range ifs {
		kinds[in.Name] = in.Kind
	}
	for name, p := range c.pods {
		if kinds[p.iface] != "workload" {
			c.t.Errorf("pod %s: interface %s is %q in the eBPF dataplane, want workload", name, p.iface, kinds[p.iface])
		}
	}
	if out := c.node.MustRun(c.t, "iptables-nft-save", "-t", "filter"); strings.Contains(out, "cali-from-wl-dispatch") || !strings.Contains(out, ":cali-FORWARD") {
		c.t.Errorf("felix's filter table in eBPF mode: want only the guard chains:\n%s", out)
	}
}
