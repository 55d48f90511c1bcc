package felix

import (
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	"path/filepath"

	"fmt"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"net/netip"
	"slices"
	"strings"
)

// felixConfig is the FelixConfiguration newCluster writes, for tests that
// add fields to it.
func (c *cluster) felixConfig() string {
	if c.bpf {
		return felixConfigBase + "  bpfEnabled: true\n"
	}
	return felixConfigBase
}

// checkBPFEnforces checks that the eBPF dataplane, not iptables, holds
// the node's policy: every pod's interface has a workload entry, and
// felix's filter chains are only the guard.
func (c *cluster) checkBPFEnforces() {
	c.t.Helper()
	for name, p := range c.pods {
		if k := c.ifaceKind(p.iface); k != "workload" {
			c.t.Errorf("pod %s: interface %s is %q in the eBPF dataplane, want workload", name, p.iface, k)
		}
	}
	// iptables-nft-save fails now and then while the table changes.
	var out string
	var err error
	for range 10 {
		if out, err = c.node.Run("iptables-nft-save", "-t", "filter"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || strings.Contains(out, "cali-from-wl-dispatch") || !strings.Contains(out, ":cali-FORWARD") {
		c.t.Errorf("felix's filter table in eBPF mode: want only the guard chains (%v):\n%s", err, out)
	}
}

// checkAttachedWithTC checks how the pods' interfaces run the programs:
// as our cls_bpf filters on both hooks (tc), or with no filter of ours
// (TCX links).
func (c *cluster) checkAttachedWithTC(tc bool) {
	c.t.Helper()
	for name, p := range c.pods {
		for _, hook := range []string{"ingress", "egress"} {
			out, err := c.node.Run("tc", "filter", "show", "dev", p.iface, hook)
			if got := err == nil && strings.Contains(out, "palisade"); got != tc {
				c.t.Errorf("pod %s: %s hook of %s has our cls_bpf filter: %v, want %v (%v)\n%s", name, hook, p.iface, got, tc, err, out)
			}
		}
	}
}

// ifaceKind is an interface's kind in the eBPF dataplane ("" when it has
// no entry).
func (c *cluster) ifaceKind(name string) string {
	v, err := c.bpfView()
	if err != nil {
		return ""
	}
	defer v.Close()
	ifs, _ := v.Interfaces()
	for _, in := range ifs {
		if in.Name == name {
			return in.Kind
		}
	}
	return ""
}

// waitIface waits until an interface has the kind ("" for no entry).
func (c *cluster) waitIface(name, kind string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("interface %s %q in the eBPF dataplane", name, kind), func() bool { return c.ifaceKind(name) == kind })
}

// waitHostEndpoint waits until eth-ext is (or is not) a host endpoint.
func (c *cluster) waitHostEndpoint(present bool) {
	c.t.Helper()
	if !c.bpf {
		c.waitChain("filter", "cali-fh-eth-ext", present)
		return
	}
	// Not a host endpoint, eth-ext is a host data interface (it matches
	// bpfDataIfacePattern's default, and the host conntrack bypass is on).
	kind := "data"
	if present {
		kind = "host"
	}
	c.waitIface("eth-ext", kind)
}

// ruleCount is the packets counted by rules of a policy ("tier/name")
// with an action on an interface, in the eBPF dataplane.
func (c *cluster) ruleCount(iface, policy, action string) uint64 {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	n, err := v.RuleCount(iface, policy, action)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// checkBPFIPv6 checks a dual-stack pod's entry: its IPv6 address is an
// allowed source, and a set holds another pod's IPv6 address.
func (c *cluster) checkBPFIPv6(pod, source, member string) {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	defer v.Close()
	ifs, _ := v.Interfaces()
	found := false
	for _, in := range ifs {
		if in.Name == c.pods[pod].iface {
			found = slices.Contains(in.Sources, netip.MustParsePrefix(source))
		}
	}
	if !found {
		c.t.Errorf("%s's interface does not allow source %s: %+v", pod, source, ifs)
	}
	sets, err := v.IPSets()
	if err != nil {
		c.t.Fatal(err)
	}
	held := false
	for _, ms := range sets {
		held = held || slices.Contains(ms, member)
	}
	if !held {
		c.t.Errorf("no IP set holds %s: %v", member, sets)
	}
}

// toHostOK reports whether an interface's entry lets workload traffic
// to the host through (defaultEndpointToHostAction not Drop).
func (c *cluster) toHostOK(name string) bool {
	v, err := c.bpfView()
	if err != nil {
		return false
	}
	defer v.Close()
	ifs, _ := v.Interfaces()
	for _, in := range ifs {
		if in.Name == name {
			return in.ToHostOK
		}
	}
	return false
}

// detachByHand detaches the programs of an interface through their
// pinned links, as someone tampering with the node would.
func (c *cluster) detachByHand(name string) {
	c.t.Helper()
	v, err := c.bpfView()
	if err != nil {
		c.t.Fatal(err)
	}
	dir := v.Dir
	ifs, _ := v.Interfaces()
	v.Close()
	for _, in := range ifs {
		if in.Name != name {
			continue
		}
		// Only the hook towards the workload: without the other, the
		// workload's packets are not marked and the guard drops them.
		if c.noTCX {
			c.node.MustRun(c.t, "tc", "filter", "del", "dev", name, "egress")
			return
		}
		for _, hook := range []string{"out"} {
			l, err := link.LoadPinnedLink(filepath.Join(dir, "links", fmt.Sprintf("%d-%s", in.Ifindex, hook)), nil)
			if err != nil {
				c.t.Fatal(err)
			}
			if err := l.Detach(); err != nil {
				c.t.Fatal(err)
			}
			l.Close()
		}
		return
	}
	c.t.Fatalf("no entry for %s", name)
}

// packetLog collects the calico-packet lines felix logs for Log rules
// (the eBPF dataplane's LOG).
type packetLog struct {
	mu      sync.Mutex
	entries []log.Fields
}

func (p *packetLog) Levels() []log.Level { return log.AllLevels }

func (p *packetLog) Fire(e *log.Entry) error {
	if strings.HasPrefix(e.Message, "calico-packet:") {
		p.mu.Lock()
		p.entries = append(p.entries, e.Data)
		p.mu.Unlock()
	}
	return nil
}

// has reports a line for a packet on iface that a rule of the named
// policy logged.
func (p *packetLog) has(iface, policy string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.entries {
		if f["iface"] == iface && f["policy"] == policy {
			return true
		}
	}
	return false
}

// capturePacketLog adds a hook to the standard logger (felix's logger
// shares its hooks) until the test ends.
func capturePacketLog(t *testing.T) *packetLog {
	p := &packetLog{}
	log.AddHook(p)
	t.Cleanup(func() {
		hooks := log.StandardLogger().Hooks
		for lvl, hs := range hooks {
			kept := hs[:0]
			for _, h := range hs {
				if h != p {
					kept = append(kept, h)
				}
			}
			hooks[lvl] = kept
		}
	})
	return p
}

// checkEngineObject checks which object's entry programs run on the
// pods' interfaces, as the kernel reports them: those of the object with
// the policy engine use its memory (map pal_pol), those of the object
// without bpf_loop (bpfNoLoop) use none of the engine's maps.
func (c *cluster) checkEngineObject(engine bool) {
	c.t.Helper()
	for name, p := range c.pods {
		ids := c.entryPrograms(p.iface)
		if len(ids) == 0 {
			c.t.Errorf("pod %s: no program runs on %s", name, p.iface)
		}
		for _, id := range ids {
			maps, err := programMaps(id)
			if err != nil {
				c.t.Errorf("pod %s: program %d on %s: %v", name, id, p.iface, err)
				continue
			}
			if got := slices.Contains(maps, palbpf.MapPolicy) || slices.Contains(maps, palbpf.MapID6); got != engine {
				c.t.Errorf("pod %s: program %d on %s uses the policy engine's maps: %v, want %v (maps %v)", name, id, p.iface, got, engine, maps)
			}
		}
	}
}

// entryPrograms are the IDs of the programs attached to an interface of
// the node, by TCX links or cls_bpf filters, on both hooks.
func (c *cluster) entryPrograms(iface string) []ebpf.ProgramID {
	c.t.Helper()
	l, err := c.nodeH.LinkByName(iface)
	if err != nil {
		c.t.Fatal(err)
	}
	var ids []ebpf.ProgramID
	_ = c.nodeRun.Do(func() error {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			if r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at}); err == nil {
				for _, p := range r.Programs {
					ids = append(ids, p.ID)
				}
			}
		}
		return nil
	})
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, _ := c.nodeH.FilterList(l, parent)
		for _, f := range fs {
			if b, ok := f.(*netlink.BpfFilter); ok && b.Id > 0 {
				ids = append(ids, ebpf.ProgramID(b.Id))
			}
		}
	}
	return ids
}

// programMaps names the maps a loaded program uses.
func programMaps(id ebpf.ProgramID) ([]string, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return nil, err
	}
	mids, _ := info.MapIDs()
	var names []string
	for _, mid := range mids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			return nil, err
		}
		mi, err := m.Info()
		m.Close()
		if err != nil {
			return nil, err
		}
		names = append(names, mi.Name)
	}
	return names, nil
}
