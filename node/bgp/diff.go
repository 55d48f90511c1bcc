package bgp

import (
	"net/netip"
	"sort"

	"github.com/palisade-net/palisade/node/bgp/paths"
	"github.com/palisade-net/palisade/node/bgp/peers"
)

// PeerPlan is the minimal change from the applied sessions to the desired
// ones.
type PeerPlan struct {
	Add, Update, Delete []peers.Peer
}

// Empty reports whether the plan changes nothing.
func (p PeerPlan) Empty() bool { return len(p.Add)+len(p.Update)+len(p.Delete) == 0 }

// DiffPeers compares applied sessions (by Key) with desired ones. A session
// whose AS, source address, password, TTL security or passive end changed
// is deleted and added again (GoBGP cannot change them on a live
// connection); other changes are updates.
func DiffPeers(applied map[string]peers.Peer, desired []peers.Peer) PeerPlan {
	var plan PeerPlan
	want := make(map[string]bool, len(desired))
	for _, d := range desired {
		want[d.Key()] = true
		have, ok := applied[d.Key()]
		switch {
		case !ok:
			plan.Add = append(plan.Add, d)
		case have == d:
		case have.AS != d.AS || have.LocalAS != d.LocalAS || have.SourceAddress != d.SourceAddress || have.Password != d.Password ||
			have.TTLSecurity != d.TTLSecurity || have.Passive != d.Passive || have.Node != d.Node:
			plan.Delete = append(plan.Delete, have)
			plan.Add = append(plan.Add, d)
		default:
			plan.Update = append(plan.Update, d)
		}
	}
	for k, have := range applied {
		if !want[k] {
			plan.Delete = append(plan.Delete, have)
		}
	}
	sort.Slice(plan.Delete, func(i, j int) bool { return plan.Delete[i].Key() < plan.Delete[j].Key() })
	return plan
}

// DiffPaths compares applied originated paths with desired ones: the paths
// to advertise (new or changed) and those to withdraw.
func DiffPaths(applied map[netip.Prefix]paths.Path, desired []paths.Path) (advertise, withdraw []paths.Path) {
	want := make(map[netip.Prefix]bool, len(desired))
	for _, d := range desired {
		want[d.Prefix] = true
		if have, ok := applied[d.Prefix]; !ok || !have.Equal(d) {
			advertise = append(advertise, d)
		}
	}
	for pfx, have := range applied {
		if !want[pfx] {
			withdraw = append(withdraw, have)
		}
	}
	sort.Slice(withdraw, func(i, j int) bool { return withdraw[i].Prefix.String() < withdraw[j].Prefix.String() })
	return advertise, withdraw
}
