package bpf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/rules"
)

// slowApply is the apply time above which the phases are logged.
const slowApply = 30 * time.Millisecond

// ctCollectEvery is how often expired conntrack entries are deleted.
const ctCollectEvery = 10 * time.Second

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

func mapSizeConntrack(cfg *calc.Config) int {
	if cfg.Spec.BPFMapSizeConntrack != nil {
		return *cfg.Spec.BPFMapSizeConntrack
	}
	return 0
}

func mapSizeIPSets(cfg *calc.Config) int {
	if cfg.Spec.BPFMapSizeIPSets != nil {
		return *cfg.Spec.BPFMapSizeIPSets
	}
	return 0
}

// configTimeouts are the defaults with bpfConntrackTimeouts over them (a
// duration each, or Auto for the default).
func configTimeouts(cfg *calc.Config, defaults palbpf.Timeouts, logger *log.Entry) palbpf.Timeouts {
	t := defaults
	c := cfg.Spec.BPFConntrackTimeouts
	if c == nil {
		return t
	}
	for _, f := range []struct {
		name string
		v    *string
		dst  *time.Duration
	}{
		{"tcpSynSent", c.TCPSynSent, &t.TCPSynSent}, {"tcpEstablished", c.TCPEstablished, &t.TCPEstablished},
		{"tcpFinsSeen", c.TCPFinsSeen, &t.TCPFinsSeen}, {"tcpResetSeen", c.TCPResetSeen, &t.TCPResetSeen},
		{"udpTimeout", c.UDPTimeout, &t.UDP}, {"genericTimeout", c.GenericTimeout, &t.Other}, {"icmpTimeout", c.ICMPTimeout, &t.ICMP},
	} {
		if f.v == nil || strings.EqualFold(*f.v, "Auto") || *f.v == "" {
			continue
		}
		d, err := time.ParseDuration(*f.v)
		if err != nil || d <= 0 {
			logger.WithField("bpfConntrackTimeouts."+f.name, *f.v).Warn("Not a duration: using the default")
			continue
		}
		*f.dst = d
	}
	return t
}

// warnIgnored names the settings felix acts on with iptables but the
// eBPF dataplane does not (the fields no dataplane acts on are named by
// felix from v3.FelixConfigurationActedOn).
func warnIgnored(cfg *calc.Config, logger *log.Entry) {
	var fields []string
	if cfg.IptablesFilterDenyAction == "Reject" {
		fields = append(fields, "iptablesFilterDenyAction (the programs drop)")
	}
	if c := cfg.Spec.BPFConntrackTimeouts; c != nil && c.CreationGracePeriod != nil {
		fields = append(fields, "bpfConntrackTimeouts.creationGracePeriod")
	}
	if cfg.IptablesMarkMask&palbpf.MarkSeen == 0 {
		fields = append(fields, fmt.Sprintf("iptablesMarkMask (the programs mark with %#x, outside it)", palbpf.MarkSeen))
	}
	if len(fields) > 0 {
		logger.WithField("fields", strings.Join(fields, ", ")).Warn("FelixConfiguration settings the eBPF dataplane does not act on")
	}
}

// setup opens the namespace's objects and reads the kernel back.
func (d *Driver) setup(ctx context.Context) error {
	timeouts, err := palbpf.DefaultTimeouts()
	if err != nil {
		return err
	}
	timeouts = configTimeouts(d.cfg, timeouts, d.log)
	t := d.conf.Timeouts
	for _, p := range []struct{ dst, src *time.Duration }{
		{&timeouts.TCPSynSent, &t.TCPSynSent}, {&timeouts.TCPEstablished, &t.TCPEstablished}, {&timeouts.TCPFinsSeen, &t.TCPFinsSeen},
		{&timeouts.TCPResetSeen, &t.TCPResetSeen}, {&timeouts.UDP, &t.UDP}, {&timeouts.ICMP, &t.ICMP}, {&timeouts.Other, &t.Other},
		{&timeouts.Fragment, &t.Fragment},
	} {
		if *p.src > 0 {
			*p.dst = *p.src
		}
	}
	d.timeouts = timeouts
	objs, err := palbpf.Open(palbpf.Options{Root: d.conf.Root, NS: d.run, ConntrackEntries: mapSizeConntrack(d.cfg), IPSetEntries: mapSizeIPSets(d.cfg), Timeouts: timeouts, Log: d.log})
	if err != nil {
		return err
	}
	ifs, err := newIfaceState(objs, d.att, d.log)
	if err != nil {
		objs.Close()
		return err
	}
	if err := d.sets.readBack(objs); err != nil {
		d.att.close()
		objs.Close()
		return err
	}
	d.objs, d.ifaces = objs, ifs
	d.progs = newPrograms(objs, d.log)
	d.progs.metrics = d.conf.Metrics
	d.progs.adopt(ifs.usedSlots())
	if d.events, err = newEventReader(objs, d.log); err != nil {
		d.log.WithError(err).Warn("Log rules' packets will not be logged")
	}
	b, err := iptables.DetectBackend(ctx, d.run, d.cfg.IptablesBackend)
	if err != nil {
		return err
	}
	d.backend = b
	d.families = []int{4}
	if d.cfg.IPv6Support && b.Available(6) {
		d.families = append(d.families, 6)
	}
	for _, v := range d.families {
		for _, name := range rules.TableNames() {
			tbl := iptables.NewTable(name, v, b, d.run, d.log)
			tbl.SetMetrics(d.conf.Metrics)
			d.tables = append(d.tables, tbl)
		}
	}
	d.ready = true
	now := time.Now()
	d.lastRefresh.iptables, d.lastRefresh.routes, d.lastRefresh.gc = now, now, now
	d.log.WithFields(log.Fields{"dir": objs.Dir, "backend": b, "ipVersions": d.families}).Info("eBPF dataplane ready")
	return nil
}

// NextRefresh is how long until the next periodic work is due.
func (d *Driver) NextRefresh(now time.Time) time.Duration {
	next := ctCollectEvery
	if d.cfg == nil || !d.ready {
		return time.Minute
	}
	if w := d.gcDue().Sub(now); w < next {
		next = w
	}
	for _, x := range []struct {
		last  time.Time
		every time.Duration
	}{{d.lastRefresh.iptables, d.cfg.IptablesRefreshInterval}, {d.lastRefresh.routes, d.cfg.RouteRefreshInterval}} {
		if x.every > 0 {
			if w := x.last.Add(x.every).Sub(now); w < next {
				next = w
			}
		}
	}
	return max(next, 0)
}

// Apply does the kernel work collected since the last Apply: IP set
// members added, policy programs loaded, interfaces' entries and
// attachments, routes, iptables (nat, guard), then what is no longer
// used (set members, programs), and endpoint status. Nothing is written
// before the datastore is in sync.
func (d *Driver) Apply(ctx context.Context) error {
	if !d.inSync || d.cfg == nil {
		return nil
	}
	if !d.ready {
		if err := d.setup(ctx); err != nil {
			return err
		}
	}
	defer d.run.WarmUp()
	now := time.Now()
	if every := d.cfg.IptablesRefreshInterval; every > 0 && now.Sub(d.lastRefresh.iptables) >= every {
		d.lastRefresh.iptables = now
		for _, t := range d.tables {
			t.Invalidate()
		}
		for _, m := range d.poolSets {
			m.Resync()
		}
		// A tampered map or attachment is repaired too.
		if err := d.readBack(); err != nil {
			return err
		}
		d.failsafeDirty = true
	}
	if every := d.cfg.RouteRefreshInterval; every > 0 && now.Sub(d.lastRefresh.routes) >= every {
		d.lastRefresh.routes = now
		d.routes.Resync()
	}
	phases := log.Fields{}
	last := time.Now()
	phase := func(name string) {
		phases[name] = time.Since(last)
		last = time.Now()
	}
	defer func() {
		if total := time.Since(now); total > slowApply {
			d.log.WithFields(phases).WithField("total", total).Debug("Slow dataplane apply")
		}
	}()
	var errs []error
	d.applyForward()
	if d.failsafeDirty {
		if err := d.applyFailsafe(); err != nil {
			errs = append(errs, err)
		} else {
			d.failsafeDirty = false
		}
	}
	phase("sets")
	if err := d.sets.applyAdds(d.objs); err != nil {
		errs = append(errs, err)
	}
	for _, m := range d.poolSets {
		if err := m.ApplyUpdates(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	phase("pre-endpoints")
	released, err := d.applyEndpoints(now)
	if err != nil {
		errs = append(errs, err)
	}
	phase("endpoints")
	want, err := d.wanted()
	if err != nil {
		errs = append(errs, err)
	}
	phase("wanted")
	ifaceErr := d.ifaces.apply(want)
	if ifaceErr != nil {
		errs = append(errs, ifaceErr)
	}
	phase("ifaces")
	if d.releaseRoutes() > 0 {
		d.quietUntil = now.Add(quietAfterNewPod)
	}
	if err := d.routes.Apply(); err != nil {
		errs = append(errs, err)
	}
	phase("routes")
	// The first write of felix's iptables in this mode replaces what the
	// iptables dataplane enforced: it waits for the attachments under way
	// (fresh TCX links are made in the background; their end pokes the
	// loop), so policy is never off between the two.
	rulesOK := false
	if d.iptablesWritten || !d.att.pending() {
		rulesOK = d.applyIptables(ctx, &errs)
		d.iptablesWritten = d.iptablesWritten || rulesOK
	}
	phase("iptables")
	for _, p := range released {
		d.progs.release(p, now)
	}
	if ifaceErr == nil {
		if err := d.sets.applyRemovals(d.objs); err != nil {
			errs = append(errs, err)
		}
		if err := d.progs.sweep(now, false); err != nil {
			errs = append(errs, err)
		}
		for _, dir := range d.objs.StaleMapDirs() {
			if err := palbpf.RemoveDir(dir, d.run); err != nil {
				errs = append(errs, err)
			}
		}
	}
	d.progs.endCompile()
	if rulesOK {
		for _, m := range d.poolSets {
			if err := m.ApplyDeletions(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	phase("cleanup")
	// The sweep every ctCollectEvery (not while a new pod makes its first
	// connections: it walks whole maps, which took the CPU from them); the
	// entries of interfaces gone at once (the rule counters' sweep waits:
	// no key of theirs is read).
	periodic := !now.Before(d.gcDue())
	if periodic || len(d.ifaces.gone) > 0 {
		if periodic {
			d.lastRefresh.gc = now
		}
		n, err := collectConntrack(d.objs, d.timeouts, d.ifaces.gone, &d.sweeps)
		d.conf.Metrics.ConntrackCleaned(n)
		if err != nil {
			errs = append(errs, err)
		} else {
			clear(d.ifaces.gone)
		}
		if n > 0 {
			d.log.WithField("entries", n).Debug("Conntrack entries expired")
		}
		if periodic && ifaceErr == nil {
			if err := d.collectCounters(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if ifaceErr == nil && len(errs) == 0 {
		errs = append(errs, d.reportStatus()...)
	}
	phase("gc")
	d.updateEventView(want)
	return errors.Join(errs...)
}

// hostConntrackBypass is FelixConfiguration bpfHostConntrackBypass,
// true unless set false (Calico's default).
func hostConntrackBypass(cfg *calc.Config) bool {
	return cfg.Spec.BPFHostConntrackBypass == nil || *cfg.Spec.BPFHostConntrackBypass
}

// applyForward puts the forward program in its slot or empties it, as
// bpfHostConntrackBypass says. A kernel that cannot run it (no
// nf_conntrack kfuncs) is named once in the log; packets then take the
// kernel's path.
func (d *Driver) applyForward() {
	want := hostConntrackBypass(d.cfg)
	if d.forward != nil && *d.forward == want {
		return
	}
	if err := d.objs.SetForward(want); err != nil {
		d.log.WithError(err).Warn("bpfHostConntrackBypass: established flows take the kernel's path (netfilter and its conntrack)")
	} else {
		d.log.WithField("bpfHostConntrackBypass", want).Info("Host conntrack bypass set")
	}
	if !want && (d.forward == nil || *d.forward) {
		// Bypassed flows now meet netfilter, whose entries of them are
		// stale: forget those so they are picked up afresh.
		n, err := palbpf.ForgetBypassedFlows(d.run, d.objs.Maps[palbpf.MapCT])
		if err != nil {
			d.log.WithError(err).Warn("Host conntrack entries of bypassed flows not deleted: their next packets may be INVALID to netfilter")
		} else if n > 0 {
			d.log.WithField("entries", n).Info("Host conntrack entries of bypassed flows deleted")
		}
	}
	d.forward = &want
}

// quietAfterNewPod is how long the periodic sweeps wait after a workload
// became reachable, and quietAtMost how late that makes them at most
// (pods arriving all the time do not starve them).
const (
	quietAfterNewPod = 100 * time.Millisecond
	quietAtMost      = time.Second
)

// gcDue is when the periodic conntrack and counter sweeps are due.
func (d *Driver) gcDue() time.Time {
	due := d.lastRefresh.gc.Add(ctCollectEvery)
	if due.Before(d.quietUntil) {
		return minTime(d.quietUntil, due.Add(quietAtMost))
	}
	return due
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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

// readBack reads the interfaces' entries, sources, attachments and set
// members back, so the next writes repair what someone changed.
func (d *Driver) readBack() error {
	ifs, err := newIfaceState(d.objs, d.att, d.log)
	if err != nil {
		return err
	}
	for k, g := range d.ifaces.gone {
		ifs.gone[k] = g
	}
	d.ifaces = ifs
	return d.sets.readBack(d.objs)
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
	for name, li := range links {
		if d.isWorkloadIface(name) {
			w := ifaceWant{name: name, kind: 0, ep: palbpf.Endpoint{Flags: palbpf.EndpointBlocked, L2len: li.l2}, workload: true, group: li.group}
			if st := workloads[name]; st != nil {
				flags := palbpf.EndpointWorkload | toHostDrop
				if li.veth && redirectToPeer(d.cfg) != "Disabled" {
					flags |= palbpf.EndpointVeth
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
// a host endpoint's gets the data interface program: it matches
// bpfDataIfacePattern or bpfL3IfacePattern (Calico's list of tunnel
// devices beside the data interfaces), and the host conntrack bypass is
// on (the program does nothing else) with a kernel that could load it.
func (d *Driver) dataIface(name string) bool {
	matches := (d.dataPattern != nil && d.dataPattern.MatchString(name)) || (d.l3Pattern != nil && d.l3Pattern.MatchString(name))
	return matches && d.forward != nil && *d.forward && d.objs.Entry[palbpf.KindData][palbpf.In] != nil
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

// applyIptables writes nat and the guard, and removes the rest of felix's
// iptables (what the iptables dataplane left). It reports whether every
// table was written.
func (d *Driver) applyIptables(ctx context.Context, errs *[]error) bool {
	ok := true
	if d.rendered.cfg != d.cfg {
		d.rendered.cfg, d.rendered.rs = d.cfg, nil
		for _, v := range d.families {
			d.rendered.rs = append(d.rendered.rs, rules.BPFMode(rules.Input{Config: d.cfg, IPVersion: v}, palbpf.MarkSeen, palbpf.AttachedGroup))
		}
	}
	for i, v := range d.families {
		rs := d.rendered.rs[i]
		tables := d.tables[i*len(rules.TableNames()) : (i+1)*len(rules.TableNames())]
		if needs := func() bool {
			for _, t := range tables {
				if t.NeedsRead() {
					return true
				}
			}
			return false
		}(); needs {
			sections, err := iptables.ReadAll(ctx, d.run, d.backend, v)
			d.conf.Metrics.Save(err)
			if err == nil {
				for _, t := range tables {
					if t.NeedsRead() {
						t.Load(sections[t.Name])
					}
				}
			}
		}
		for _, t := range tables {
			t.SetChains(rs.Tables[t.Name])
			t.SetJumps(rs.Jumps, d.cfg.ChainInsertMode)
			if _, err := t.Apply(ctx); err != nil {
				*errs = append(*errs, err)
				ok = false
			}
		}
	}
	return ok
}

// reportStatus writes the status of endpoints programmed since the last
// report and removes that of endpoints gone.
func (d *Driver) reportStatus() []error {
	var errs []error
	for id := range d.epRemoved {
		if err := d.status.Removed(id); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.epRemoved, id)
	}
	for id := range d.epDirty {
		ep := d.endpoints[id]
		if ep == nil {
			delete(d.epDirty, id)
			continue
		}
		if st := d.states[id]; st == nil && id.Kind == calc.WorkloadEndpoint {
			continue // not resolved yet
		}
		if _, exists := d.linkIndex[ep.InterfaceName]; exists && id.Kind == calc.WorkloadEndpoint && !d.ifaceReady(ep.InterfaceName) {
			continue // its attachment is under way
		}
		if err := d.status.Programmed(ep); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.epDirty, id)
	}
	if err := d.status.SweepOnce(d.endpoints); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// eventViewKey is what the Log reader's view of an interface depends on.
type eventViewKey struct {
	name  string
	progs [palbpf.Stages]*program
}

// updateEventView gives the Log reader the interfaces and programs that
// changed: it keeps a view of its own, changed in place (made anew on
// every apply, the view was much of felix's garbage).
func (d *Driver) updateEventView(want map[int]ifaceWant) {
	if d.events == nil {
		return
	}
	if d.eventView == nil {
		d.eventView = map[int]eventViewKey{}
	}
	for idx, w := range want {
		k := eventViewKey{name: w.name}
		for i, slot := range w.ep.Slots {
			k.progs[i] = d.progs.bySlot[slot]
		}
		if old, ok := d.eventView[idx]; ok && old == k {
			continue
		}
		d.eventView[idx] = k
		var ds [palbpf.Stages]*policy.Description
		for i, p := range k.progs {
			if p != nil {
				ds[i] = &p.desc
			}
		}
		d.events.set(uint32(idx), w.name, ds)
	}
	for idx := range d.eventView {
		if _, ok := want[idx]; !ok {
			delete(d.eventView, idx)
			d.events.remove(uint32(idx))
		}
	}
}
