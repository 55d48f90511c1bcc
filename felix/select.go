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
}

func (s *selector) make(bpf bool) error {
	var err error
	if bpf {
		s.d, err = bpfdp.New(bpfdp.Config{NetNS: s.conf.NetNS, StatusDir: s.conf.StatusDir, Log: s.conf.Log})
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
	if s.on() {
		s.d.OnIPSetUpdate(set)
	}
}

func (s *selector) OnIPSetDelta(id string, added, removed []string) {
	if s.on() {
		s.d.OnIPSetDelta(id, added, removed)
	}
}

func (s *selector) OnIPSetRemoved(id string) {
	if s.on() {
		s.d.OnIPSetRemoved(id)
	}
}

func (s *selector) OnPolicyUpdate(p *calc.Policy) {
	if s.on() {
		s.d.OnPolicyUpdate(p)
	}
}

func (s *selector) OnPolicyRemoved(id calc.PolicyID) {
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
	if s.on() {
		s.d.OnEndpointUpdate(ep)
	}
}

func (s *selector) OnEndpointRemoved(id calc.EndpointID) {
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
