package felix

import (
	"context"
	"net/netip"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane"
	bpfdp "github.com/palisade-net/palisade/felix/dataplane/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/metrics"
)

// driver is what the main loop needs of a dataplane: the iptables one
// (felix/dataplane) or the eBPF one (felix/dataplane/bpf).
type driver interface {
	calc.Dataplane
	Apply(ctx context.Context) error
	NextRefresh(now time.Time) time.Duration
	Pending() bool
	InSync() bool
	Close()
}

// selector is the dataplane the graph feeds: it makes the driver that
// FelixConfiguration bpfEnabled asks for at the first configuration (the
// main loop flushes the graph only once it is in sync, so that is the
// datastore's), and when bpfEnabled changes it asks the main loop to start
// again with the other one. Each driver removes what the other left: the
// eBPF one writes felix's iptables down to what it keeps there, and the
// iptables one, after its first complete write, detaches and unpins the
// programs and maps of package bpf.
type selector struct {
	conf    dataplane.Config
	log     *log.Entry
	d       driver
	bpf     bool
	restart bool
	// cleaned: the iptables driver removed the eBPF leftovers.
	cleaned bool
	// active counts what the driver was given, for the metrics (kept
	// only while conf.Metrics is set).
	active activeCounts
}

// activeCounts are the endpoints, policies and IP sets (with their sizes)
// the calculation graph has given the dataplane: what this host enforces.
type activeCounts struct {
	endpoints map[calc.EndpointID]struct{}
	policies  map[calc.PolicyID]struct{}
	sets      map[string]int
	members   int
}

func (a *activeCounts) init() {
	if a.endpoints == nil {
		a.endpoints, a.policies, a.sets = map[calc.EndpointID]struct{}{}, map[calc.PolicyID]struct{}{}, map[string]int{}
	}
}

func (a *activeCounts) setSize(id string, n int) {
	a.init()
	a.members += n - a.sets[id]
	a.sets[id] = n
}

// report sets the active gauges of m.
func (s *selector) report(m *metrics.Felix) {
	a := &s.active
	selectors := len(a.sets)
	for _, id := range []string{calc.IPSetMasqPools, calc.IPSetAllPools} {
		if _, ok := a.sets[id]; ok {
			selectors--
		}
	}
	m.Active(len(a.endpoints), len(a.policies), selectors, len(a.sets), a.members)
}

func (s *selector) make(bpf bool) error {
	var err error
	if bpf {
		s.d, err = bpfdp.New(bpfdp.Config{NetNS: s.conf.NetNS, StatusDir: s.conf.StatusDir, Log: s.conf.Log, Metrics: s.conf.Metrics})
	} else {
		s.d, err = dataplane.New(s.conf)
	}
	s.bpf = bpf
	return err
}

func bpfEnabled(cfg *calc.Config) bool { return cfg.Spec.BPFEnabled != nil && *cfg.Spec.BPFEnabled }

// OnConfigUpdate implements calc.Dataplane.
func (s *selector) OnConfigUpdate(cfg *calc.Config) {
	if s.d == nil {
		if err := s.make(bpfEnabled(cfg)); err != nil {
			s.log.WithError(err).Error("Dataplane not started")
			s.d = nil
			s.restart = true
			return
		}
		s.log.WithField("bpfEnabled", s.bpf).Info("Dataplane selected")
	} else if bpfEnabled(cfg) != s.bpf {
		s.restart = true
	}
	s.d.OnConfigUpdate(cfg)
}

// switching reports whether the main loop must start again (bpfEnabled
// changed, or the dataplane could not start).
func (s *selector) switching() bool { return s.restart }

// Apply applies the driver, and once the iptables driver has written
// everything, removes what the eBPF dataplane left.
func (s *selector) Apply(ctx context.Context) error {
	if s.d == nil || s.restart {
		return nil
	}
	err := s.d.Apply(ctx)
	if err == nil && !s.bpf && !s.cleaned && s.d.InSync() {
		run, rerr := nsexec.New(s.conf.NetNS)
		if rerr == nil {
			rerr = palbpf.RemoveAll("", run)
			run.Close()
		}
		if rerr != nil {
			return rerr
		}
		s.cleaned = true
	}
	return err
}

// wake fires when the driver wants an apply outside the loop's timers.
func (s *selector) wake() <-chan struct{} {
	if w, ok := s.d.(interface{ Wake() <-chan struct{} }); ok {
		return w.Wake()
	}
	return nil
}

func (s *selector) NextRefresh(now time.Time) time.Duration {
	if s.d == nil {
		return time.Minute
	}
	return s.d.NextRefresh(now)
}

func (s *selector) Pending() bool { return s.d != nil && s.d.Pending() }
func (s *selector) InSync() bool  { return s.d != nil && s.d.InSync() }

func (s *selector) Close() {
	if s.d != nil {
		s.d.Close()
	}
}

// The rest of calc.Dataplane goes to the driver, while there is one.

func (s *selector) on() bool { return s.d != nil }

func (s *selector) OnIPSetUpdate(set *calc.IPSet) {
	if s.conf.Metrics != nil {
		s.active.setSize(set.ID, len(set.Members))
	}
	if s.on() {
		s.d.OnIPSetUpdate(set)
	}
}

func (s *selector) OnIPSetDelta(id string, added, removed []string) {
	if s.conf.Metrics != nil {
		s.active.setSize(id, s.active.sets[id]+len(added)-len(removed))
	}
	if s.on() {
		s.d.OnIPSetDelta(id, added, removed)
	}
}

func (s *selector) OnIPSetRemoved(id string) {
	if s.conf.Metrics != nil {
		s.active.setSize(id, 0)
		delete(s.active.sets, id)
	}
	if s.on() {
		s.d.OnIPSetRemoved(id)
	}
}

func (s *selector) OnPolicyUpdate(p *calc.Policy) {
	if s.conf.Metrics != nil {
		s.active.init()
		s.active.policies[p.ID] = struct{}{}
	}
	if s.on() {
		s.d.OnPolicyUpdate(p)
	}
}

func (s *selector) OnPolicyRemoved(id calc.PolicyID) {
	delete(s.active.policies, id)
	if s.on() {
		s.d.OnPolicyRemoved(id)
	}
}

func (s *selector) OnProfileUpdate(p *calc.Profile) {
	if s.on() {
		s.d.OnProfileUpdate(p)
	}
}

func (s *selector) OnProfileRemoved(name string) {
	if s.on() {
		s.d.OnProfileRemoved(name)
	}
}

func (s *selector) OnEndpointUpdate(ep *calc.Endpoint) {
	if s.conf.Metrics != nil {
		s.active.init()
		s.active.endpoints[ep.ID] = struct{}{}
	}
	if s.on() {
		s.d.OnEndpointUpdate(ep)
	}
}

func (s *selector) OnEndpointRemoved(id calc.EndpointID) {
	delete(s.active.endpoints, id)
	if s.on() {
		s.d.OnEndpointRemoved(id)
	}
}

func (s *selector) OnRouteUpdate(r calc.Route) {
	if s.on() {
		s.d.OnRouteUpdate(r)
	}
}

func (s *selector) OnRouteRemoved(dst netip.Prefix) {
	if s.on() {
		s.d.OnRouteRemoved(dst)
	}
}

func (s *selector) OnInSync() {
	if s.on() {
		s.d.OnInSync()
	}
}
