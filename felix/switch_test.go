package felix

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/palisade-net/palisade/bpf/inspect"
)

// tcxPrograms counts the TCX programs attached to an interface of the
// node, both hooks.
func (c *cluster) tcxPrograms(iface string) int {
	c.t.Helper()
	l, err := c.nodeH.LinkByName(iface)
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	_ = c.nodeRun.Do(func() error {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			if r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at}); err == nil {
				n += len(r.Programs)
			}
		}
		return nil
	})
	return n
}

// TestDataplaneSwitch turns bpfEnabled on and off under a running felix:
// each time the node moves to the other dataplane, policy holds, and what
// the other one left is gone (felix's iptables chains but the eBPF mode's
// own; the programs, their attachments and their pins).
func TestDataplaneSwitch(t *testing.T) {
	c := newCluster(t, "NFT")
	setupPods(c)
	rs := c.apply(core[1].yaml)
	c.waitPolicies(rs, true)
	probes := core[1].probes
	c.expect(probes...)
	web := c.pods["web"]

	c.apply(felixConfigBase + "  bpfEnabled: true\n")
	c.bpf = true
	c.waitIface(web.iface, "workload")
	c.waitPolicies(rs, true)
	// iptables-nft-save fails now and then while felix changes the
	// table: that is a reason to look again.
	filter := func() string { out, _ := c.node.Run(c.save, "-t", "filter"); return out }
	c.waitFor("felix's iptables down to the eBPF mode's", func() bool {
		f := filter()
		return !strings.Contains(f, "cali-from-wl-dispatch") && !strings.Contains(f, "cali-tw-") && strings.Contains(f, ":cali-FORWARD")
	})
	// The sets go after the rules that referred to them: in a later
	// apply on a loaded machine.
	c.waitFor("the iptables dataplane's selector IP sets removed", func() bool {
		out, _ := c.node.Run("ipset", "list", "-n")
		return !strings.Contains(out, "cali40s:")
	})
	c.expect(probes...)
	c.checkBPFEnforces()

	c.apply(felixConfigBase)
	c.bpf = false
	c.waitPolicies(rs, true)
	c.waitFor("the eBPF dataplane removed", func() bool {
		_, err := inspect.Open("", c.nodeRun)
		return errors.Is(err, inspect.ErrNotProgrammed) && c.tcxPrograms(web.iface) == 0
	})
	c.waitFor("the dispatch chains back", func() bool { return strings.Contains(filter(), "cali-from-wl-dispatch") })
	c.expect(probes...)
}
