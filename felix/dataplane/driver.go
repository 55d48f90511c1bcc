// Package dataplane is felix's iptables dataplane: it receives the
// calculation graph's output (it implements calc.Dataplane) cheaply and, in
// Apply, does the kernel work in one batch and in dependency order — IP sets
// first, then the iptables tables (per family), then the workload routes,
// then the removal of IP sets no rule uses any more — and finally reports
// each workload endpoint whose rules are in place through a status file.
package dataplane

import (
	"net/netip"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/ipsets"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/routes"
	"github.com/palisade-net/palisade/felix/metrics"
)

// Config configures a Driver.
type Config struct {
	// NetNS is the path of the network namespace to program ("" for the
	// current one).
	NetNS string
	// StatusDir receives one file per programmed workload endpoint (see
	// EndpointStatus); "" writes none.
	StatusDir string
	// Log is the logger (logrus' standard one when nil).
	Log *log.Entry
	// Metrics counts the driver's iptables, ipset and netlink calls (nil:
	// metrics off).
	Metrics *metrics.Felix
}

// family is the state of one IP family.
type family struct {
	version int
	sets    *ipsets.Manager
	tables  []*iptables.Table
	render  *renderer
}

// Driver is the dataplane of one node.
type Driver struct {
	run     *nsexec.Runner
	log     *log.Entry
	metrics *metrics.Felix
	routes  *routes.Manager
	hosts   *hostIfaces
	rpf     *rpFilter
	status  statusFiles

	cfg       *calc.Config
	backend   iptables.Backend
	families  []*family
	sets      [2]*ipsets.Manager // IPv4, IPv6
	policies  map[calc.PolicyID]*calc.Policy
	profiles  map[string]*calc.Profile
	endpoints map[calc.EndpointID]*calc.Endpoint
	// pending endpoint status changes, reported after a successful apply.
	epDirty   map[calc.EndpointID]struct{}
	epRemoved map[calc.EndpointID]struct{}

	rulesDirty  bool
	inSync      bool
	swept       bool
	lastRefresh struct{ iptables, ipsets, routes, ifaces time.Time }
}

// New makes the driver; nothing is written before OnInSync and Apply.
func New(cfg Config) (*Driver, error) {
	logger := cfg.Log
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	run, err := nsexec.New(cfg.NetNS)
	if err != nil {
		return nil, err
	}
	rm, err := routes.New(run, logger)
	if err != nil {
		run.Close()
		return nil, err
	}
	hosts, err := newHostIfaces(run)
	if err != nil {
		rm.Close()
		run.Close()
		return nil, err
	}
	sets := [2]*ipsets.Manager{ipsets.New(4, run, logger), ipsets.New(6, run, logger)}
	for _, m := range sets {
		m.SetMetrics(cfg.Metrics)
	}
	return &Driver{
		run: run, log: logger, metrics: cfg.Metrics, routes: rm, hosts: hosts, rpf: newRPFilter(),
		sets:     sets,
		status:   statusFiles{dir: cfg.StatusDir, written: map[calc.EndpointID]string{}},
		policies: map[calc.PolicyID]*calc.Policy{}, profiles: map[string]*calc.Profile{},
		endpoints: map[calc.EndpointID]*calc.Endpoint{},
		epDirty:   map[calc.EndpointID]struct{}{}, epRemoved: map[calc.EndpointID]struct{}{},
	}, nil
}

// Close releases the driver's handles (the kernel state stays).
func (d *Driver) Close() {
	for _, f := range d.families {
		for _, t := range f.tables {
			t.Close()
		}
	}
	for _, m := range d.sets {
		m.Close()
	}
	d.routes.Close()
	d.hosts.close()
	d.run.Close()
}

// Backend is the iptables backend in use ("" before the first Apply).
func (d *Driver) Backend() iptables.Backend { return d.backend }

// Runner runs commands in the driver's namespace.
func (d *Driver) Runner() *nsexec.Runner { return d.run }

// OnConfigUpdate implements calc.Dataplane.
func (d *Driver) OnConfigUpdate(cfg *calc.Config) {
	if d.cfg != nil && d.backend != "" {
		if cfg.IptablesBackend != d.cfg.IptablesBackend || cfg.IPv6Support != d.cfg.IPv6Support {
			d.log.Warn("iptablesBackend or ipv6Support changed: restart felix to apply")
		}
	}
	d.cfg = cfg
	d.hosts.configure(cfg, d.log)
	d.routes.SetInterfacePrefixes(cfg.InterfacePrefixes)
	d.routes.SetOptions(routes.OptionsOf(cfg))
	d.forSets(func(m *ipsets.Manager) { m.SetMaxSize(cfg.MaxIPSetSize) })
	d.rulesDirty = true
}

// OnIPSetUpdate implements calc.Dataplane.
func (d *Driver) OnIPSetUpdate(s *calc.IPSet) {
	d.forSets(func(m *ipsets.Manager) { m.Set(s.ID, s.Type, s.Members) })
}

// OnIPSetDelta implements calc.Dataplane.
func (d *Driver) OnIPSetDelta(id string, added, removed []string) {
	d.forSets(func(m *ipsets.Manager) { m.Delta(id, added, removed) })
}

// OnIPSetRemoved implements calc.Dataplane.
func (d *Driver) OnIPSetRemoved(id string) { d.forSets(func(m *ipsets.Manager) { m.Remove(id) }) }

// forSets applies f to both families' set managers.
func (d *Driver) forSets(f func(*ipsets.Manager)) {
	for _, m := range d.sets {
		f(m)
	}
}

// OnPolicyUpdate implements calc.Dataplane.
func (d *Driver) OnPolicyUpdate(p *calc.Policy) { d.policies[p.ID] = p; d.rulesDirty = true }

// OnPolicyRemoved implements calc.Dataplane.
func (d *Driver) OnPolicyRemoved(id calc.PolicyID) { delete(d.policies, id); d.rulesDirty = true }

// OnProfileUpdate implements calc.Dataplane.
func (d *Driver) OnProfileUpdate(p *calc.Profile) { d.profiles[p.Name] = p; d.rulesDirty = true }

// OnProfileRemoved implements calc.Dataplane.
func (d *Driver) OnProfileRemoved(name string) { delete(d.profiles, name); d.rulesDirty = true }

// OnEndpointUpdate implements calc.Dataplane.
func (d *Driver) OnEndpointUpdate(ep *calc.Endpoint) {
	if old := d.endpoints[ep.ID]; old != nil && old.InterfaceName != ep.InterfaceName {
		d.routes.SetPeering(old.InterfaceName, nil)
	}
	if ep.ID.Kind == calc.WorkloadEndpoint {
		d.routes.SetPeering(ep.InterfaceName, ep.PeeringAddrs)
	}
	d.endpoints[ep.ID] = ep
	d.rpf.update(ep.ID, ep)
	d.epDirty[ep.ID] = struct{}{}
	delete(d.epRemoved, ep.ID)
	d.rulesDirty = true
}

// OnEndpointRemoved implements calc.Dataplane.
func (d *Driver) OnEndpointRemoved(id calc.EndpointID) {
	if old := d.endpoints[id]; old != nil && id.Kind == calc.WorkloadEndpoint {
		d.routes.SetPeering(old.InterfaceName, nil)
	}
	delete(d.endpoints, id)
	d.rpf.update(id, nil)
	delete(d.epDirty, id)
	d.epRemoved[id] = struct{}{}
	d.rulesDirty = true
}

// OnRouteUpdate implements calc.Dataplane.
func (d *Driver) OnRouteUpdate(r calc.Route) { d.routes.Set(r.Dst, r.Iface) }

// OnRouteRemoved implements calc.Dataplane.
func (d *Driver) OnRouteRemoved(dst netip.Prefix) { d.routes.Remove(dst) }

// OnInSync implements calc.Dataplane.
func (d *Driver) OnInSync() { d.inSync = true }

// InSync reports whether the datastore was read completely.
func (d *Driver) InSync() bool { return d.inSync }

// Pending reports whether work is waiting for a retry (a route or an
// rp_filter setting whose interface is not there yet).
func (d *Driver) Pending() bool { return d.routes.Pending() > 0 || d.rpf.pending() > 0 }
