package policy

import (
	"net/netip"
	"testing"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// TestOwnSourceBeforeTrie: anti-spoofing lets a workload's packet through
// when its source is the entry's own IPv4 address or one of its allowed
// sources (another address, an allowed prefix, IPv6), and drops any
// other, whether the entry holds an own address or not. The own address
// is decided by the entry alone (no trie lookup): with no sources at all
// it still passes, and nothing else does.
func TestOwnSourceBeforeTrie(t *testing.T) {
	e := newBed(t)
	allow := e.load(Input{Final: true, Profiles: []Profile{{Name: "all", Rules: []calc.Rule{{Action: calc.Allow}}}}})
	slots := map[int]uint32{bpf.StageNormalIn: allow}
	sources := []string{"10.0.0.1/32", "10.0.0.9/32", "192.0.2.0/24", "fd00::1/128"}
	for _, own := range []string{"10.0.0.1", "10.0.0.9", ""} {
		src4 := uint32(0)
		if own != "" {
			src4 = bpf.Src4(netip.MustParseAddr(own))
		}
		e.clearCT()
		e.entry(e.a, bpf.Endpoint{Flags: bpf.EndpointWorkload, L2len: 14, Src4: src4}, slots, sources...)
		for _, c := range []struct {
			src, dst string
			pass     bool
		}{
			{"10.0.0.1", "10.0.0.2", true},
			{"10.0.0.9", "10.0.0.2", true},
			{"192.0.2.77", "10.0.0.2", true},
			{"10.0.0.5", "10.0.0.2", false},
			{"0.0.0.0", "10.0.0.2", false},
			{"fd00::1", "fd00::2", true},
			{"fd00::5", "fd00::2", false},
		} {
			v, _ := e.send(false, bpf.In, e.a, 0, udp(c.src, c.dst, 53).bytes())
			if got := v == -1; got != c.pass {
				t.Errorf("own address %q: a packet from %s: verdict %d, want passed %v", own, c.src, v, c.pass)
			}
		}
	}

	e.clearCT()
	e.entry(e.b, bpf.Endpoint{Flags: bpf.EndpointWorkload, L2len: 14, Src4: bpf.Src4(netip.MustParseAddr("10.0.0.7"))}, slots)
	if v, _ := e.send(false, bpf.In, e.b, 0, udp("10.0.0.7", "10.0.0.2", 53).bytes()); v != -1 {
		t.Errorf("a packet from the entry's own address, no sources in the trie: verdict %d, want passed", v)
	}
	if v, _ := e.send(false, bpf.In, e.b, 0, udp("10.0.0.8", "10.0.0.2", 53).bytes()); v == -1 {
		t.Error("a packet from another address, no sources in the trie: passed, want dropped")
	}
}
