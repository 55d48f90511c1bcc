package bpf

import (
	"context"
	"errors"
	"fmt"
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

func mapSizeConntrack(cfg *calc.Config) int {
	if cfg.Spec.BPFMapSizeConntrack != nil {
		return *cfg.Spec.BPFMapSizeConntrack
	}
	return 0
}

// intOr0 is a map size's setting, 0 (the default) when unset.
func intOr0(v *int) int {
	if v == nil || *v < 0 {
		return 0
	}
	return *v
}

// natMapSizes are the NAT maps' settings, to tell when they changed.
func natMapSizes(cfg *calc.Config) [3]int {
	return [3]int{intOr0(cfg.Spec.BPFMapSizeNATFrontend), intOr0(cfg.Spec.BPFMapSizeNATBackend), intOr0(cfg.Spec.BPFMapSizeNATAffinity)}
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
	objs, err := palbpf.Open(palbpf.Options{Root: d.conf.Root, NS: d.run, ConntrackEntries: mapSizeConntrack(d.cfg), IPSetEntries: mapSizeIPSets(d.cfg),
		MaglevEntries: d.lb.settings.maglevEntries(), NATFrontendEntries: intOr0(d.cfg.Spec.BPFMapSizeNATFrontend),
		NATBackendEntries: intOr0(d.cfg.Spec.BPFMapSizeNATBackend), NATAffinityEntries: intOr0(d.cfg.Spec.BPFMapSizeNATAffinity),
		Timeouts: timeouts, NoLoop: !d.useEngine(d.cfg), Log: d.log})
	if err != nil {
		return err
	}
	if objs.Engine {
		d.log.WithField("object", "palisade").Info("eBPF programs loaded with the policy engine")
	} else {
		d.log.WithField("object", "palisadeNoLoop").Info("eBPF programs loaded without the policy engine (no bpf_loop call)")
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
	if d.events, err = newEventReader(objs, d.log); err != nil {
		d.log.WithError(err).Warn("Log rules' packets will not be logged")
	} else {
		d.progs.onSlot = d.events.setSlot
	}
	d.progs.startEngine(d.sets)
	d.progs.adopt(ifs.usedSlots())
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
	d.kubeProxyDue = true
	d.ctlb = ctlbState{}
	d.lb.resync()
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
		d.lb.resync()
		d.kubeProxyDue = true
		d.checkCTLB()
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
	if use := d.progs.eng != nil && !d.progs.engineBroken && d.useEngine(d.cfg); use != d.progs.useEngine {
		d.progs.useEngine = use
		d.stagesDirty = true
	}
	if err := d.sets.syncEngine(false); err != nil && !d.progs.engineBroken {
		d.progs.engineFailed(err)
		d.stagesDirty = true
		errs = append(errs, err)
	}
	if err := d.applyTunnel(); err != nil {
		errs = append(errs, err)
	}
	if err := d.lb.apply(d.objs); err != nil {
		errs = append(errs, err)
	}
	d.applyCTLB()
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
	// The Log reader learns the new programs as soon as they are
	// attached, not after the sweeps below: a packet a new Log rule
	// matched must be logged with its policy's name.
	d.updateEventView(want)
	if err := d.applyFloating(); err != nil {
		errs = append(errs, err)
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
	if d.kubeProxyDue && kubeProxyCleanup(d.cfg) {
		if err := d.cleanKubeProxy(ctx); err != nil {
			errs = append(errs, err)
		} else {
			d.kubeProxyDue = false
		}
	}
	phase("iptables")
	for _, p := range released {
		d.progs.release(p, now)
	}
	if ifaceErr == nil {
		if err := d.sets.applyRemovals(d.objs); err != nil {
			errs = append(errs, err)
		}
		if err := d.sets.syncEngine(true); err != nil && !d.progs.engineBroken {
			d.progs.engineFailed(err)
			d.stagesDirty = true
			errs = append(errs, err)
		}
		if err := d.progs.sweep(now, false); err != nil {
			errs = append(errs, err)
		}
		// The interfaces name this felix's stages only: what a previous
		// one left in the engine goes.
		if err := d.progs.dropForeign(); err != nil {
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
			chains := rs.Tables[t.Name]
			if t.Name == "nat" {
				chains = d.withFloating(chains, v)
			}
			t.SetChains(chains)
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
