// Package bpf is felix's eBPF dataplane: it takes the calculation graph's
// output (it implements calc.Dataplane) cheaply and, in Apply, enforces
// it with the TCX programs of package bpf on every workload interface and
// host endpoint — IP sets into BPF maps, each endpoint's stages compiled
// into policy programs shared by the endpoints whose rules are the same,
// interfaces' entries pointing at them — and keeps in iptables only what
// it needs there (natOutgoing, the guard of workload interfaces). It reads
// the kernel back at start, so a restarted felix adopts what the last one
// left, and it removes what the iptables dataplane left. See DESIGN.md.
package bpf

import (
	"net/netip"
	"reflect"
	"regexp"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	"github.com/palisade-net/palisade/felix/dataplane/ipsets"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/routes"
	"github.com/palisade-net/palisade/felix/metrics"
	"github.com/palisade-net/palisade/felix/rules"
)

// Config configures a Driver.
type Config struct {
	// NetNS is the path of the network namespace to program ("" for the
	// current one).
	NetNS string
	// StatusDir receives one file per programmed workload endpoint.
	StatusDir string
	// Root is the bpffs directory of the namespaces' pins
	// (palbpf.DefaultRoot when empty).
	Root string
	// Timeouts override the conntrack timeouts (tests).
	Timeouts palbpf.Timeouts
	// Log is the logger (logrus' standard one when nil).
	Log *log.Entry
	// RCUMark is the file saying felix turned the kernel's expedited RCU
	// grace periods on (bpfExpediteAttach; rcuMark when empty, tests give
	// their own).
	RCUMark string
	// RCUSwitch stands for the kernel's expedited RCU switch; empty is
	// the kernel's own (/sys/kernel/rcu_expedited). Tests give a file of
	// their own: the kernel's is node-wide, and every felix a test runs
	// beside them turns it on and off.
	RCUSwitch string
	// Metrics counts program loads, conntrack sweeps and the iptables and
	// ipset calls of what stays in iptables (nil: metrics off).
	Metrics *metrics.Felix
}

// Driver is the eBPF dataplane of one node.
type Driver struct {
	conf Config
	// rcuNoted: the TCX attachment's cost has been logged.
	rcuNoted bool
	// rcu expedites RCU grace periods while felix makes TCX links.
	rcu *rcuScope
	// tcx is whether the kernel has TCX (probed at the first
	// configuration; nil before).
	tcx *bool
	// tcxLogged is the TCX choice last logged.
	tcxLogged *bool
	// loop is whether the kernel has bpf_loop (probed once), which the
	// policy engine needs; loopLogged the engine choice last logged.
	loop, loopLogged *bool
	run              *nsexec.Runner
	log              *log.Entry
	routes           *routes.Manager
	hosts            *dataplane.HostInterfaces
	status           *dataplane.StatusFiles
	links            *linkWatch

	cfg       *calc.Config
	objs      *palbpf.Objects
	backend   iptables.Backend
	families  []int
	tables    []*iptables.Table // per family, in rules.TableNames order
	timeouts  palbpf.Timeouts
	poolSets  [2]*ipsets.Manager
	policies  map[calc.PolicyID]*calc.Policy
	profiles  map[string]*calc.Profile
	endpoints map[calc.EndpointID]*calc.Endpoint
	sets      *setMaps
	lb        lbMaps
	ctlb      ctlbState
	progs     *programs
	ifaces    *ifaceState
	att       *attacher
	groups    *groupSetter
	events    *eventReader
	states    map[calc.EndpointID]*epState

	// pending endpoint status changes, reported after a successful apply.
	epDirty   map[calc.EndpointID]struct{}
	epRemoved map[calc.EndpointID]struct{}
	// stagesDirty: every endpoint's stages are computed again (the
	// configuration changed); changedPolicies and changedProfiles: those
	// of the endpoints that refer to one of them.
	stagesDirty     bool
	changedPolicies map[calc.PolicyID]bool
	changedProfiles map[string]bool
	// routeWant are the calc's workload routes; routeSet those given to
	// the routes manager: a route waits for its interface's programs.
	routeWant, routeSet map[netip.Prefix]string
	// linkIndex are the node's interfaces by name, as wanted last saw them.
	linkIndex map[string]int
	// failsafeDirty: the failsafe ports are written again.
	failsafeDirty bool
	// forward is the host conntrack bypass as last set (nil: not yet).
	forward *bool
	// kubeProxyDue: kube-proxy's iptables rules are looked for (at
	// start and every iptablesRefreshInterval) and removed when
	// bpfKubeProxyIptablesCleanupEnabled.
	kubeProxyDue bool
	// iptablesWritten: felix's iptables were written in this mode once.
	iptablesWritten bool
	// dataPattern is bpfDataIfacePattern (nil: none is a data interface).
	dataPattern *regexp.Regexp
	// l3Pattern is bpfL3IfacePattern: more data interfaces, the L3
	// devices (nil: none).
	l3Pattern   *regexp.Regexp
	inSync      bool
	ready       bool
	lastRefresh struct{ iptables, routes, gc time.Time }
	// sweeps are the conntrack and counter sweeps' buffers; wantBufs the
	// maps wanted() fills on every apply.
	sweeps   sweepBufs
	wantBufs struct {
		links     map[string]linkInfo
		want      map[int]ifaceWant
		workloads map[string]*epState
		named     map[string]*epState
	}
	// fipWant are the floating IPs (workloads' ipNATs, when floatingIPs
	// is Enabled) as wanted() last found them, for MapFloating.
	fipWant map[palbpf.NodeKey]palbpf.FloatingValue
	// eventView is what the Log reader was last given, by interface.
	eventView map[int]eventViewKey
	// rendered is what BPFMode rendered for cfg, by family.
	rendered struct {
		cfg *calc.Config
		rs  []*rules.Ruleset
	}
	// quietUntil: the periodic sweeps wait until then (a new pod's first
	// connections).
	quietUntil time.Time
	// blockedSince are the workload interfaces with no endpoint yet, by
	// name, since when wanted() has seen them so (AwaitingEndpoints).
	blockedSince map[string]time.Time

	wake chan struct{}
}

// New makes the driver; nothing is written before OnInSync and Apply.
func New(conf Config) (*Driver, error) {
	logger := conf.Log
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	logger = logger.WithField("dataplane", "bpf")
	run, err := nsexec.New(conf.NetNS)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		conf: conf, run: run, log: logger, status: dataplane.NewStatusFiles(conf.StatusDir),
		policies: map[calc.PolicyID]*calc.Policy{}, profiles: map[string]*calc.Profile{},
		endpoints: map[calc.EndpointID]*calc.Endpoint{},
		epDirty:   map[calc.EndpointID]struct{}{}, epRemoved: map[calc.EndpointID]struct{}{},
		changedPolicies: map[calc.PolicyID]bool{}, changedProfiles: map[string]bool{},
		sets: newSetMaps(logger), wake: make(chan struct{}, 1),
		routeWant: map[netip.Prefix]string{}, routeSet: map[netip.Prefix]string{},
	}
	if d.groups, err = newGroupSetter(run); err != nil {
		run.Close()
		return nil, err
	}
	mark, sw := conf.RCUMark, conf.RCUSwitch
	if mark == "" {
		mark = rcuMark
	}
	if sw == "" {
		sw = rcuExpedited
	}
	d.rcu = newRCUScope(sw, mark, logger)
	d.att = newAttacher(d.poke, d.groups.set, d.rcu)
	d.poolSets = [2]*ipsets.Manager{ipsets.New(4, run, logger), ipsets.New(6, run, logger)}
	for _, m := range d.poolSets {
		m.SetMetrics(conf.Metrics)
	}
	if d.routes, err = routes.New(run, logger); err != nil {
		d.Close()
		return nil, err
	}
	if d.hosts, err = dataplane.NewHostInterfaces(run); err != nil {
		d.Close()
		return nil, err
	}
	if d.links, err = watchLinks(run, d.poke, d.att.preattach, logger); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close releases the driver's handles; the kernel state stays (pinned).
func (d *Driver) Close() {
	if d.events != nil {
		d.events.close()
	}
	if d.links != nil {
		d.links.close()
	}
	for _, t := range d.tables {
		t.Close()
	}
	for _, m := range d.poolSets {
		if m != nil {
			m.Close()
		}
	}
	if d.progs != nil {
		d.progs.close()
	}
	d.att.close()
	d.groups.close()
	if d.objs != nil {
		d.objs.Close()
	}
	if d.routes != nil {
		d.routes.Close()
	}
	if d.hosts != nil {
		d.hosts.Close()
	}
	d.run.Close()
}

// Wake fires when the kernel changed in a way the driver must act on (a
// workload interface appeared): the caller should Apply.
func (d *Driver) Wake() <-chan struct{} { return d.wake }

func (d *Driver) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// OnConfigUpdate implements calc.Dataplane.
func (d *Driver) OnConfigUpdate(cfg *calc.Config) {
	if d.cfg != nil && d.backend != "" && (cfg.IptablesBackend != d.cfg.IptablesBackend || cfg.IPv6Support != d.cfg.IPv6Support) {
		d.log.Warn("iptablesBackend or ipv6Support changed: restart felix to apply")
	}
	if d.cfg != nil && d.objs != nil && (mapSizeConntrack(cfg) != mapSizeConntrack(d.cfg) || mapSizeIPSets(cfg) != mapSizeIPSets(d.cfg) ||
		natMapSizes(cfg) != natMapSizes(d.cfg) || !reflect.DeepEqual(cfg.Spec.BPFConntrackTimeouts, d.cfg.Spec.BPFConntrackTimeouts)) {
		d.log.Warn("bpfMapSize* or bpfConntrackTimeouts changed: restart felix to apply")
	}
	d.cfg = cfg
	d.hosts.Configure(cfg, d.log)
	d.routes.SetInterfacePrefixes(cfg.InterfacePrefixes)
	d.routes.SetOptions(routes.OptionsOf(cfg))
	for _, m := range d.poolSets {
		m.SetMaxSize(cfg.MaxIPSetSize)
	}
	d.att.setPrefixes(cfg.InterfacePrefixes)
	tcx := d.useTCX(cfg)
	d.att.setTC(cfg.Spec.BPFAttachType == "TC", tcx)
	expedite := cfg.Spec.BPFExpediteAttach == nil || *cfg.Spec.BPFExpediteAttach
	d.rcu.setEnabled(expedite)
	if cfg.Spec.BPFAttachType != "TC" && tcx && !expedite && !d.rcuNoted {
		d.rcuNoted = true
		noteRCUGracePeriods(d.log, rcuExpedited)
	}
	pattern := cfg.Spec.BPFDataIfacePattern
	if pattern == "" {
		pattern = defaultDataIfacePattern
	}
	if re, err := regexp.Compile(pattern); err != nil {
		d.log.WithError(err).WithField("bpfDataIfacePattern", pattern).Warn("Not a regular expression: no host data interface gets the bypass program")
		d.dataPattern = nil
	} else {
		d.dataPattern = re
	}
	d.l3Pattern = nil
	if pattern := cfg.Spec.BPFL3IfacePattern; pattern != "" {
		if re, err := regexp.Compile(pattern); err != nil {
			d.log.WithError(err).WithField("bpfL3IfacePattern", pattern).Warn("Not a regular expression: no L3 interface gets the bypass program")
		} else {
			d.l3Pattern = re
		}
	}
	lbs := lbSettingsOf(cfg, d.log)
	if d.objs != nil && lbs.maglevEntries() != d.lb.settings.maglevEntries() {
		d.log.Warn("bpfMaglevMaxEndpointsPerService or bpfMaglevMaxServices changed the Maglev map's size: restart felix to apply")
	}
	d.lb.settings, d.lb.log, d.lb.dirty = lbs, d.log, true
	d.stagesDirty, d.failsafeDirty = true, true
	warnIgnored(cfg, d.log)
}

// OnIPSetUpdate implements calc.Dataplane.
func (d *Driver) OnIPSetUpdate(s *calc.IPSet) {
	if isPoolSet(s.ID) {
		for _, m := range d.poolSets {
			m.Set(s.ID, s.Type, s.Members)
		}
		return
	}
	d.sets.set(s.ID, s.Type, s.Members)
}

// OnIPSetDelta implements calc.Dataplane.
func (d *Driver) OnIPSetDelta(id string, added, removed []string) {
	if isPoolSet(id) {
		for _, m := range d.poolSets {
			m.Delta(id, added, removed)
		}
		return
	}
	d.sets.delta(id, added, removed)
}

// OnIPSetRemoved implements calc.Dataplane.
func (d *Driver) OnIPSetRemoved(id string) {
	if isPoolSet(id) {
		for _, m := range d.poolSets {
			m.Remove(id)
		}
		return
	}
	d.sets.remove(id)
}

// isPoolSet says whether a set lives in the kernel's ipset (the pools and
// the nodes' addresses, which the iptables rules the eBPF dataplane keeps
// use) rather than in a BPF map.
func isPoolSet(id string) bool { return calc.IsNodeSet(id) }

// OnPolicyUpdate implements calc.Dataplane.
func (d *Driver) OnPolicyUpdate(p *calc.Policy) { d.policies[p.ID] = p; d.changedPolicies[p.ID] = true }

// OnPolicyRemoved implements calc.Dataplane.
func (d *Driver) OnPolicyRemoved(id calc.PolicyID) {
	delete(d.policies, id)
	d.changedPolicies[id] = true
}

// OnProfileUpdate implements calc.Dataplane.
func (d *Driver) OnProfileUpdate(p *calc.Profile) {
	d.profiles[p.Name] = p
	d.changedProfiles[p.Name] = true
}

// OnProfileRemoved implements calc.Dataplane.
func (d *Driver) OnProfileRemoved(name string) {
	delete(d.profiles, name)
	d.changedProfiles[name] = true
}

// OnEndpointUpdate implements calc.Dataplane.
func (d *Driver) OnEndpointUpdate(ep *calc.Endpoint) {
	if old := d.endpoints[ep.ID]; old != nil && old.InterfaceName != ep.InterfaceName {
		d.routes.SetPeering(old.InterfaceName, nil)
	}
	if ep.ID.Kind == calc.WorkloadEndpoint {
		d.routes.SetPeering(ep.InterfaceName, ep.PeeringAddrs)
	}
	d.endpoints[ep.ID] = ep
	d.epDirty[ep.ID] = struct{}{}
	delete(d.epRemoved, ep.ID)
}

// OnEndpointRemoved implements calc.Dataplane.
func (d *Driver) OnEndpointRemoved(id calc.EndpointID) {
	if old := d.endpoints[id]; old != nil && id.Kind == calc.WorkloadEndpoint {
		d.routes.SetPeering(old.InterfaceName, nil)
	}
	delete(d.endpoints, id)
	delete(d.epDirty, id)
	d.epRemoved[id] = struct{}{}
}

// OnRouteUpdate implements calc.Dataplane.
func (d *Driver) OnRouteUpdate(r calc.Route) {
	d.routeWant[r.Dst] = r.Iface
	if set, ok := d.routeSet[r.Dst]; ok && set != r.Iface {
		d.routes.Remove(r.Dst)
		delete(d.routeSet, r.Dst)
	}
}

// OnRouteRemoved implements calc.Dataplane.
func (d *Driver) OnRouteRemoved(dst netip.Prefix) {
	delete(d.routeWant, dst)
	if _, ok := d.routeSet[dst]; ok {
		d.routes.Remove(dst)
		delete(d.routeSet, dst)
	}
}

// OnInSync implements calc.Dataplane.
func (d *Driver) OnInSync() { d.inSync = true }

// InSync reports whether the datastore was read completely.
func (d *Driver) InSync() bool { return d.inSync }

// Pending reports whether work waits for a retry (a route whose interface
// is not up yet).
func (d *Driver) Pending() bool { return d.routes.Pending() > 0 }

// Runner runs commands in the driver's namespace.
func (d *Driver) Runner() *nsexec.Runner { return d.run }

// Dir is the namespace's bpffs directory ("" before the first Apply).
func (d *Driver) Dir() string {
	if d.objs == nil {
		return ""
	}
	return d.objs.Dir
}
