package bpf

import (
	"errors"
	"net/netip"
	"strings"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// The endpoints' side of Apply: their stages and programs, the entries
// of the interfaces they and the host's own interfaces get, and the
// workload routes released once an interface is ready.

// epState is an endpoint as programmed: its stages' programs.
type epState struct {
	ep    *calc.Endpoint
	progs [palbpf.Stages]*program
	// failed stages got the drop program (fail closed).
	failed bool
	// srcs are its allowed sources on interface srcsFor.
	srcs    map[palbpf.SrcKey]struct{}
	srcsFor int
}

// applyEndpoints works out the stages of the endpoints that changed (all
// of them after a configuration, policy or profile change) and takes
// their programs; it returns the programs they held before, to be
// released once nothing points at them.
func (d *Driver) applyEndpoints(now time.Time) ([]*program, error) {
	if d.states == nil {
		d.states = map[calc.EndpointID]*epState{}
	}
	eps, resolveErr := d.hosts.Endpoints(d.endpoints)
	var released []*program
	var errs []error
	if resolveErr != nil {
		errs = append(errs, resolveErr)
	}
	for id, st := range d.states {
		if _, ok := eps[id]; !ok {
			released = append(released, st.progs[:]...)
			delete(d.states, id)
		}
	}
	for id, ep := range eps {
		st := d.states[id]
		_, dirty := d.epDirty[id]
		if st != nil && st.ep == ep && !d.stagesDirty && !dirty && !d.refersToChanged(ep) {
			continue
		}
		ns := &epState{ep: ep}
		stages := StagesOf(ep, d.policies, d.profiles)
		for i, in := range stages {
			if in == nil {
				continue
			}
			p, err := d.progs.get(in)
			if err != nil {
				// Fail closed: the stage drops everything.
				d.log.WithError(err).WithField("endpoint", id.String()).Error("Policy program not built: the endpoint's traffic is dropped")
				ns.failed = true
				errs = append(errs, err)
				continue
			}
			ns.progs[i] = p
		}
		if st != nil {
			released = append(released, st.progs[:]...)
		}
		d.states[id] = ns
	}
	d.stagesDirty = false
	clear(d.changedPolicies)
	clear(d.changedProfiles)
	return released, errors.Join(errs...)
}

// refersToChanged reports whether an endpoint's stages use a policy or
// profile changed since the last apply.
func (d *Driver) refersToChanged(ep *calc.Endpoint) bool {
	if len(d.changedPolicies) == 0 && len(d.changedProfiles) == 0 {
		return false
	}
	for _, ts := range [][]calc.TierPolicies{ep.Tiers, ep.ForwardTiers, ep.PreDNATTiers, ep.UntrackedTiers} {
		for _, t := range ts {
			for _, ids := range [][]calc.PolicyID{t.Ingress, t.Egress} {
				for _, id := range ids {
					if d.changedPolicies[id] {
						return true
					}
				}
			}
		}
	}
	for _, p := range ep.Profiles {
		if d.changedProfiles[p] {
			return true
		}
	}
	return false
}

// wanted works out every managed interface's entry from the endpoints and
// the node's interfaces: known workload interfaces, unknown ones
// (blocked), and host endpoints (named ones before "*").
func (d *Driver) wanted() (map[int]ifaceWant, error) {
	// The maps are kept and refilled: made anew on every apply, with
	// every interface of the node, they were much of felix's garbage.
	b := &d.wantBufs
	if b.links == nil {
		b.links, b.want = map[string]linkInfo{}, map[int]ifaceWant{}
		b.workloads, b.named = map[string]*epState{}, map[string]*epState{}
		d.linkIndex = map[string]int{}
	}
	links := b.links
	if err := d.links.snapshotInto(links); err != nil {
		return nil, err
	}
	clear(d.linkIndex)
	for name, li := range links {
		d.linkIndex[name] = li.index
	}
	var err error
	var dropSlot uint32
	slotsOf := func(st *epState) (out [palbpf.Stages]uint32) {
		for i, p := range st.progs {
			if p != nil {
				out[i] = p.slot
			}
		}
		if st.failed {
			if dropSlot == 0 {
				dropSlot, err = d.progs.dropProgram()
			}
			for i := range out {
				if out[i] == 0 {
					out[i] = dropSlot
				}
			}
		}
		return out
	}
	want, workloads, named := b.want, b.workloads, b.named
	if d.fipWant == nil {
		d.fipWant = map[palbpf.NodeKey]palbpf.FloatingValue{}
	}
	clear(d.fipWant)
	clear(want)
	clear(workloads)
	clear(named)
	var all *epState
	for id, st := range d.states {
		switch {
		case id.Kind == calc.WorkloadEndpoint:
			workloads[st.ep.InterfaceName] = st
		case st.ep.InterfaceName == "*":
			all = st
		default:
			named[st.ep.InterfaceName] = st
		}
	}
	toHostDrop := uint32(0)
	if d.cfg.DefaultEndpointToHostAction == "Drop" {
		toHostDrop = palbpf.EndpointToHostDrop
	}
	if d.blockedSince == nil {
		d.blockedSince = map[string]time.Time{}
	}
	now := time.Now()
	for name := range d.blockedSince {
		if _, ok := links[name]; !ok || workloads[name] != nil {
			delete(d.blockedSince, name)
		}
	}
	for name, li := range links {
		if d.isWorkloadIface(name) {
			if _, ok := d.blockedSince[name]; !ok && workloads[name] == nil {
				d.blockedSince[name] = now
			}
			w := ifaceWant{name: name, kind: 0, ep: palbpf.Endpoint{Flags: palbpf.EndpointBlocked, L2len: li.l2}, workload: true, group: li.group}
			if st := workloads[name]; st != nil {
				flags := palbpf.EndpointWorkload | toHostDrop
				if li.veth && redirectToPeer(d.cfg) != "Disabled" {
					flags |= palbpf.EndpointVeth
				}
				for _, n := range st.ep.IPNATs {
					d.fipWant[palbpf.NodeKey{A: palbpf.Addr16(n.External)}] = palbpf.FloatingValue{Internal: palbpf.Addr16(n.Internal), Ifindex: uint32(li.index)}
				}
				w.ep = palbpf.Endpoint{Flags: flags, L2len: li.l2, Slots: slotsOf(st), Src4: ownSrc4(st.ep)}
				if st.srcs == nil || st.srcsFor != li.index {
					st.srcs, st.srcsFor = sources(li.index, st.ep, d.cfg), li.index
				}
				w.srcs = st.srcs
			}
			want[li.index] = w
			continue
		}
		if name == palbpf.TunnelDevice {
			want[li.index] = ifaceWant{name: name, kind: palbpf.KindTunnel, ep: palbpf.Endpoint{Flags: palbpf.EndpointTunnel, L2len: li.l2}}
			continue
		}
		st := named[name]
		if st == nil && all != nil && !d.hosts.Excludes(name) {
			st = all
		}
		if st != nil {
			want[li.index] = ifaceWant{name: name, kind: palbpf.KindHost, ep: palbpf.Endpoint{Flags: palbpf.EndpointHost, L2len: li.l2, Slots: slotsOf(st)}}
			continue
		}
		if d.dataIface(name) {
			flags := uint32(palbpf.EndpointData)
			if li.l2 == 0 && redirectToPeer(d.cfg) == "Enabled" {
				flags |= palbpf.EndpointPeerL3
			}
			want[li.index] = ifaceWant{name: name, kind: palbpf.KindData, ep: palbpf.Endpoint{Flags: flags, L2len: li.l2}}
		}
	}
	return want, err
}

// redirectToPeer is bpfRedirectToPeer, Calico's default (L2Only) when
// unset: whether the host conntrack bypass may send a packet straight to
// a veth workload's peer (skipping the host side's transmit, and so
// tcpdump there), from interfaces with an Ethernet header only (L2Only),
// from L3 data interfaces too (Enabled), or never (Disabled: the packet
// leaves by the workload interface's host side, whose program takes it).
func redirectToPeer(cfg *calc.Config) string {
	if cfg == nil || cfg.Spec.BPFRedirectToPeer == "" {
		return "L2Only"
	}
	return cfg.Spec.BPFRedirectToPeer
}

// defaultDataIfacePattern is Calico's bpfDataIfacePattern default.
const defaultDataIfacePattern = `^((en|wl|ww|sl|ib)[Popsx].*|(eth|wlan|wwan).*)`

// dataIface reports whether an interface that is neither a workload's nor
// a host endpoint's gets the data interface programs (the load balancer
// of traffic from outside, the host conntrack bypass): it matches
// bpfDataIfacePattern or bpfL3IfacePattern (Calico's list of tunnel
// devices beside the data interfaces).
func (d *Driver) dataIface(name string) bool {
	return (d.dataPattern != nil && d.dataPattern.MatchString(name)) || (d.l3Pattern != nil && d.l3Pattern.MatchString(name))
}

func (d *Driver) isWorkloadIface(name string) bool {
	for _, p := range d.cfg.InterfacePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ownSrc4 is the workload's first IPv4 address (/32), which its entry
// holds for the programs to check before the sources' trie; 0 for none.
// It is always one of sources too.
func ownSrc4(ep *calc.Endpoint) uint32 {
	for _, p := range ep.IPv4Nets {
		if p.Bits() == 32 {
			return palbpf.Src4(p.Addr())
		}
	}
	return 0
}

// sources are the addresses a workload may send from: its own, and its
// allowSpoofedSourcePrefixes when workloadSourceSpoofing is Any.
func sources(ifindex int, ep *calc.Endpoint, cfg *calc.Config) map[palbpf.SrcKey]struct{} {
	out := map[palbpf.SrcKey]struct{}{}
	add := func(p netip.Prefix) {
		p = p.Masked()
		out[palbpf.SrcKey{Prefixlen: uint32(32 + palbpf.PrefixLen16(p)), Ifindex: uint32(ifindex), Addr: palbpf.Addr16(p.Addr())}] = struct{}{}
	}
	for _, p := range ep.IPv4Nets {
		add(p)
	}
	for _, p := range ep.IPv6Nets {
		add(p)
	}
	for _, p := range spoofablePrefixes(ep, cfg) {
		add(p)
	}
	return out
}

// releaseRoutes gives the routes manager the workload routes whose
// interface has the entry programs attached and its entry written: the
// other direction is closed by the iptables guard until then, this one by
// the missing route (fail closed). A route of an interface that is not a
// workload's goes at once. It returns how many workload routes it gave.
func (d *Driver) releaseRoutes() int {
	n := 0
	for dst, iface := range d.routeWant {
		if _, ok := d.routeSet[dst]; ok {
			continue
		}
		if d.isWorkloadIface(iface) && !d.ifaceReady(iface) {
			continue
		}
		d.routes.Set(dst, iface)
		d.routeSet[dst] = iface
		if d.isWorkloadIface(iface) {
			n++
		}
	}
	return n
}

// ifaceReady reports whether an interface holds what apply wants for it:
// entry and sources written, both hooks attached.
func (d *Driver) ifaceReady(name string) bool {
	idx, ok := d.linkIndex[name]
	if !ok {
		return false
	}
	_, ok = d.ifaces.applied[idx]
	return ok
}

// awaitEndpointFor is how long after a workload interface appeared its
// endpoint is expected: the CNI plugin writes it right after making the
// veth (milliseconds; its IPAM and the datastore's write in between).
const awaitEndpointFor = time.Second

// AwaitingEndpoints reports whether a workload interface appeared less
// than awaitEndpointFor ago and has no endpoint yet: a pod is about to be
// programmed. Felix's loop does not collect garbage while idle then. The
// veth comes a few ms before its endpoint, the apply of the veth leaves
// the loop idle, and a collection started then was still marking when
// the endpoint arrived (the collector's dedicated worker and the
// allocating goroutines' assists took the two CPUs of a small node from
// the pod's programming and its first packets).
func (d *Driver) AwaitingEndpoints(now time.Time) bool {
	return awaiting(d.blockedSince, now)
}

// awaiting reports whether an interface of since (blocked since then)
// is still within awaitEndpointFor of its appearance.
func awaiting(since map[string]time.Time, now time.Time) bool {
	for _, t := range since {
		if now.Sub(t) < awaitEndpointFor {
			return true
		}
	}
	return false
}
