package calc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// paths builds the sides of the packet from, to.
func (x *explainer) paths(from, to *endRef, p Packet) {
	sameNode := from.peer.Node != "" && from.peer.Node == to.peer.Node
	if from.onHost() && to.onHost() && sameNode {
		x.note("both ends are host %s: the packet never leaves it, and felix does not police a host's traffic to itself", from.peer.Node)
		return
	}
	// The source's side.
	switch {
	case from.isWorkload():
		side := x.newSide("egress", from)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if to.onHost() && sameNode {
			x.workloadToHost(&side, from, p)
		} else {
			x.addChain(&side, StagePolicy, "", from.it, false, p, true, false)
			if !sameNode {
				x.forward(&side, from.peer.Node, false, p)
			}
		}
		x.finish(&side)
	case from.onHost():
		side := x.newSide("egress", from)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if to.isWorkload() && sameNode {
			x.notPoliced(&side, "host-to-local-workload",
				fmt.Sprintf("traffic from host %s to its own workloads is not policed (cali-OUTPUT returns packets for workload interfaces)", from.peer.Node))
			x.finish(&side)
			break
		}
		hep := from.hostItem()
		if hep == nil {
			x.notPoliced(&side, "no-host-endpoint", fmt.Sprintf("host %s has no host endpoint for %s, so its own traffic is not policed", from.peer.Node, from.addr))
			x.hostEndpointNote(from.peer.Node, nil)
			x.finish(&side)
			break
		}
		x.hostEndpointNote(from.peer.Node, hep)
		x.hostSide(&side, hep, false, p)
		x.finish(&side)
	}
	// The destination's side.
	switch {
	case to.isWorkload():
		if from.onHost() && sameNode {
			side := x.newSide("ingress", to)
			x.notPoliced(&side, "host-to-local-workload",
				fmt.Sprintf("traffic from host %s to its own workloads is not policed: the workload's ingress policy is not applied", to.peer.Node))
			x.finish(&side)
			break
		}
		side := x.newSide("ingress", to)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		if !sameNode {
			x.arriving(&side, to.peer.Node, p)
		}
		x.addChain(&side, StagePolicy, "", to.it, true, p, true, false)
		x.finish(&side)
	case to.onHost():
		if from.isWorkload() && sameNode {
			break // the source's side ended in the endpoint-to-host action
		}
		side := x.newSide("ingress", to)
		if x.ipv6Off(&side, p) {
			x.finish(&side)
			break
		}
		hep := to.hostItem()
		if hep == nil {
			x.notPoliced(&side, "no-host-endpoint", fmt.Sprintf("host %s has no host endpoint for %s, so traffic to it is not policed", to.peer.Node, to.addr))
			x.hostEndpointNote(to.peer.Node, nil)
			x.finish(&side)
			break
		}
		x.hostEndpointNote(to.peer.Node, hep)
		x.hostSide(&side, hep, true, p)
		x.finish(&side)
	}
}

func (x *explainer) newSide(dir string, e *endRef) Side {
	return Side{Direction: dir, Endpoint: e.peer, Node: e.peer.Node}
}

// ipv6Off ends a side whose node programs no IPv6 rules.
func (x *explainer) ipv6Off(side *Side, p Packet) bool {
	if p.Family() != 6 {
		return false
	}
	if cfg, _ := x.config(side.Node); cfg.IPv6Support {
		return false
	}
	x.notPoliced(side, "ipv6-off", fmt.Sprintf("ipv6Support is false on node %s: felix writes no IPv6 rules there, so IPv6 is not policed", side.Node))
	return true
}

func (x *explainer) notPoliced(side *Side, what, text string) {
	side.Stages = append(side.Stages, Stage{Name: StageNotPoliced, Verdict: VerdictAllow, Final: true, Decider: &Decider{What: what, Text: text}})
}

// finish takes the side's verdict from its stages: the first Deny, or the
// first final Allow.
func (x *explainer) finish(side *Side) {
	// The first Deny or final Allow decides, and the stages after it are
	// not reached; otherwise the last stage that allowed.
	side.Verdict = VerdictAllow
	decided := false
	for i, st := range side.Stages {
		if st.Verdict == VerdictDeny || st.Verdict == VerdictAllow && st.Final {
			side.Verdict, side.Decider = st.Verdict, st.Decider
			side.Stages = side.Stages[:i+1]
			decided = true
			break
		}
	}
	for i := len(side.Stages) - 1; !decided && i >= 0; i-- {
		if side.Stages[i].Verdict == VerdictAllow {
			side.Decider, decided = side.Stages[i].Decider, true
		}
	}
	x.out.Sides = append(x.out.Sides, *side)
}

// addChain evaluates one endpoint chain of it as a stage.
func (x *explainer) addChain(side *Side, name, epName string, it *item, ingress bool, p Packet, final, finalAllow bool) Chain {
	e := x.endpoint(it)
	var tiers []TierPolicies
	profiles := e.Profiles
	switch name {
	case StageUntracked:
		tiers, profiles = e.UntrackedTiers, nil
	case StagePreDNAT:
		tiers, profiles = e.PreDNATTiers, nil
	case StageForward:
		tiers, profiles = e.ForwardTiers, nil
	default:
		tiers = e.Tiers
	}
	c := EvalChain(tiers, profiles, ingress, p, x.policies(), final)
	side.Stages = append(side.Stages, Stage{Name: name, Endpoint: epName, Chain: &c, Verdict: c.Verdict, Final: finalAllow, Decider: c.Decider})
	return c
}

// hasTiers reports whether tiers have a policy for the direction.
func hasTiers(tiers []TierPolicies, ingress bool) bool { return HasPolicy(tiers, ingress) }

// workloadToHost is a workload's packet to its own host: the neighbour
// discovery ICMPv6 felix always accepts, the workload's egress chain,
// then DefaultEndpointToHostAction.
func (x *explainer) workloadToHost(side *Side, from *endRef, p Packet) {
	if p.Family() == 6 && p.Protocol == 58 && slices.Contains([]uint8{130, 131, 132, 133, 135, 136}, p.ICMPType) {
		side.Stages = append(side.Stages, Stage{Name: StageNeighbourDiscovery, Verdict: VerdictAllow, Final: true,
			Decider: &Decider{What: "neighbour-discovery", Text: fmt.Sprintf("ICMPv6 type %d from a workload to its host is always accepted (neighbour discovery and multicast listener messages)", p.ICMPType)}})
		return
	}
	c := x.addChain(side, StagePolicy, "", from.it, false, p, true, false)
	if c.Verdict != VerdictAllow {
		return
	}
	cfg, known := x.config(from.peer.Node)
	if !known {
		x.note("node %s's own FelixConfiguration (node.%s) is not known to this node: its defaultEndpointToHostAction is taken from the global one", from.peer.Node, from.peer.Node)
	}
	act := cmp.Or(cfg.DefaultEndpointToHostAction, "Drop")
	st := Stage{Name: StageEndpointToHost, Final: true}
	switch strings.ToLower(act) {
	case "accept":
		st.Verdict = VerdictAllow
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: "defaultEndpointToHostAction Accept: workload traffic to its host is accepted after the workload's egress policy"}
	case "return":
		st.Verdict = VerdictAllow
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: "defaultEndpointToHostAction Return: after the workload's egress policy the packet returns to the host's INPUT chain, whose other rules decide"}
	default:
		st.Verdict = VerdictDeny
		st.Decider = &Decider{What: "default-endpoint-to-host-action", Text: fmt.Sprintf("defaultEndpointToHostAction %s: workload traffic to its own host is dropped after the workload's egress policy", act)}
	}
	side.Stages = append(side.Stages, st)
}

// hostSide is a host endpoint's policy for traffic to (ingress) or from
// the host itself: failsafe ports, untracked policy, preDNAT policy
// (ingress), then its normal policy and profiles.
func (x *explainer) hostSide(side *Side, hep *item, ingress bool, p Packet) {
	name := x.keyName(hep)
	cfg, known := x.config(hep.node)
	if !known {
		x.note("node %s's own FelixConfiguration (node.%s) is not known to this node: its failsafe ports are taken from the global one", hep.node, hep.node)
	}
	ports, dir := cfg.FailsafeOutbound, "outbound"
	remote, port := p.Dst, p.DstPort
	if ingress {
		ports, dir, remote = cfg.FailsafeInbound, "inbound", p.Src
	}
	for _, fp := range ports {
		if fp.Protocol != ProtocolName(p.Protocol) || fp.Port != port {
			continue
		}
		if fp.Net.IsValid() && (fp.Net.Addr().Is4() != remote.Is4() || !fp.Net.Contains(remote)) {
			continue
		}
		where := ""
		if fp.Net.IsValid() {
			where = " for " + fp.Net.String()
		}
		side.Stages = append(side.Stages, Stage{Name: StageFailsafe, Endpoint: name, Verdict: VerdictAllow, Final: true,
			Decider: &Decider{What: "failsafe", Text: fmt.Sprintf("%s/%d is a failsafe %s port%s: it is always open, before any policy", fp.Protocol, fp.Port, dir, where)}})
		return
	}
	e := x.endpoint(hep)
	if hasTiers(e.UntrackedTiers, ingress) {
		x.addChain(side, StageUntracked, name, hep, ingress, p, false, true)
	}
	if ingress && hasTiers(e.PreDNATTiers, true) {
		x.addChain(side, StagePreDNAT, name, hep, true, p, false, true)
	}
	x.addChain(side, StagePolicy, name, hep, ingress, p, true, false)
}

// keyName is a host endpoint's name.
func (x *explainer) keyName(it *item) string {
	return strings.TrimPrefix(it.key, v3.KindHostEndpoint+"//")
}

// forward is the leaving (ingress false) or arriving host endpoint
// forward policy of a node for a forwarded packet: the "*" host
// endpoint's applyOnForward policy, when it has one for the direction.
func (x *explainer) forward(side *Side, node string, ingress bool, p Packet) {
	star := x.starHostEndpoint(node)
	x.forwardNote(node)
	if star == nil {
		return
	}
	if !hasTiers(x.endpoint(star).ForwardTiers, ingress) {
		return
	}
	x.addChain(side, StageForward, x.keyName(star), star, ingress, p, true, false)
}

// arriving is what a packet from off the node meets on the node's "*"
// host endpoint before the workload's ingress: untracked and preDNAT
// policy (a Deny drops; an Allow lets it go on, to filter's FORWARD), and
// forward policy.
func (x *explainer) arriving(side *Side, node string, p Packet) {
	star := x.starHostEndpoint(node)
	if star != nil {
		e := x.endpoint(star)
		name := x.keyName(star)
		if hasTiers(e.UntrackedTiers, true) {
			x.addChain(side, StageUntracked, name, star, true, p, false, false)
		}
		if hasTiers(e.PreDNATTiers, true) {
			x.addChain(side, StagePreDNAT, name, star, true, p, false, false)
		}
	}
	x.forward(side, node, true, p)
}

// forwardNote names the host endpoints of a node whose interface the
// packet may cross but that the explanation cannot place on its path.
func (x *explainer) forwardNote(node string) {
	special := func(e *Endpoint) bool {
		return len(e.ForwardTiers)+len(e.PreDNATTiers)+len(e.UntrackedTiers) > 0
	}
	for _, name := range x.namedHostEndpoints(node, nil, special) {
		x.out.Incomplete = true
		x.note("node %s has host endpoint %s: a forwarded packet crossing its interface also meets its applyOnForward, preDNAT and doNotTrack policy, which is not evaluated here (the interface a packet takes is not in the datastore)", node, name)
	}
}

// hostEndpointNote names the other host endpoints of a host end's node.
func (x *explainer) hostEndpointNote(node string, used *item) {
	for _, name := range x.namedHostEndpoints(node, used, func(*Endpoint) bool { return true }) {
		x.out.Incomplete = true
		x.note("node %s has host endpoint %s, not evaluated here: the interface a packet takes is not in the datastore", node, name)
	}
}
