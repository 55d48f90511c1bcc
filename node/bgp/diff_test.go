package bgp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/palisade-net/palisade/node/bgp"
	"github.com/palisade-net/palisade/node/bgp/peers"
)

// TestDiffPeers: what a change to a session costs. Settings a live
// connection carries (AS, source address, password, TTL security) make
// the session again; the others are updated in place; an unchanged
// session is left alone.
func TestDiffPeers(t *testing.T) {
	base := peers.Peer{Address: netip.MustParseAddr("198.18.0.250"), AS: 64512, LocalAS: 64512, RestartTime: 2 * time.Minute}
	cases := []struct {
		name   string
		change func(*peers.Peer)
		remake bool
	}{
		{"AS", func(p *peers.Peer) { p.AS = 65001 }, true},
		{"source address", func(p *peers.Peer) { p.SourceAddress = netip.MustParseAddr("198.18.0.1") }, true},
		{"password", func(p *peers.Peer) { p.Password = "s3cret" }, true},
		{"TTL security", func(p *peers.Peer) { p.TTLSecurity = 1 }, true},
		{"keepalive", func(p *peers.Peer) { p.KeepaliveTime = 10 * time.Second }, false},
		{"next hop", func(p *peers.Peer) { p.KeepOriginalNextHop = true }, false},
	}
	applied := map[string]peers.Peer{base.Key(): base}
	if plan := bgp.DiffPeers(applied, []peers.Peer{base}); !plan.Empty() {
		t.Errorf("unchanged session: plan %+v, want nothing", plan)
	}
	for _, c := range cases {
		want := base
		c.change(&want)
		plan := bgp.DiffPeers(applied, []peers.Peer{want})
		remade := len(plan.Delete) == 1 && len(plan.Add) == 1 && len(plan.Update) == 0
		updated := len(plan.Update) == 1 && len(plan.Delete) == 0 && len(plan.Add) == 0
		if c.remake && !remade || !c.remake && !updated {
			t.Errorf("%s changed: plan %+v, want the session %s", c.name, plan, map[bool]string{true: "made again", false: "updated"}[c.remake])
		}
	}
}
