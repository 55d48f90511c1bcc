package felix

import (
	"net/netip"

	"github.com/palisade-net/palisade/felix/calc"
)

// The graph's updates other than the configuration go to the driver,
// while there is one, and are counted for the metrics while they are on.

func (s *dataplaneSwitch) on() bool { return s.d != nil }

func (s *dataplaneSwitch) OnIPSetUpdate(set *calc.IPSet) {
	if s.conf.Metrics != nil {
		s.active.setSize(set.ID, len(set.Members))
	}
	if s.on() {
		s.d.OnIPSetUpdate(set)
	}
}

func (s *dataplaneSwitch) OnIPSetDelta(id string, added, removed []string) {
	if s.conf.Metrics != nil {
		s.active.setSize(id, s.active.sets[id]+len(added)-len(removed))
	}
	if s.on() {
		s.d.OnIPSetDelta(id, added, removed)
	}
}

func (s *dataplaneSwitch) OnIPSetRemoved(id string) {
	if s.conf.Metrics != nil {
		s.active.setSize(id, 0)
		delete(s.active.sets, id)
	}
	if s.on() {
		s.d.OnIPSetRemoved(id)
	}
}

func (s *dataplaneSwitch) OnPolicyUpdate(p *calc.Policy) {
	if s.conf.Metrics != nil {
		s.active.init()
		s.active.policies[p.ID] = struct{}{}
	}
	if s.on() {
		s.d.OnPolicyUpdate(p)
	}
}

func (s *dataplaneSwitch) OnPolicyRemoved(id calc.PolicyID) {
	delete(s.active.policies, id)
	if s.on() {
		s.d.OnPolicyRemoved(id)
	}
}

func (s *dataplaneSwitch) OnProfileUpdate(p *calc.Profile) {
	if s.on() {
		s.d.OnProfileUpdate(p)
	}
}

func (s *dataplaneSwitch) OnProfileRemoved(name string) {
	if s.on() {
		s.d.OnProfileRemoved(name)
	}
}

func (s *dataplaneSwitch) OnEndpointUpdate(ep *calc.Endpoint) {
	if s.conf.Metrics != nil {
		s.active.init()
		s.active.endpoints[ep.ID] = struct{}{}
	}
	if s.on() {
		s.d.OnEndpointUpdate(ep)
	}
}

func (s *dataplaneSwitch) OnEndpointRemoved(id calc.EndpointID) {
	delete(s.active.endpoints, id)
	if s.on() {
		s.d.OnEndpointRemoved(id)
	}
}

func (s *dataplaneSwitch) OnRouteUpdate(r calc.Route) {
	if s.on() {
		s.d.OnRouteUpdate(r)
	}
}

func (s *dataplaneSwitch) OnRouteRemoved(dst netip.Prefix) {
	if s.on() {
		s.d.OnRouteRemoved(dst)
	}
}

func (s *dataplaneSwitch) OnInSync() {
	if s.on() {
		s.d.OnInSync()
	}
}

// OnLoadBalancerUpdate implements calc.ServiceDataplane: the eBPF driver
// load-balances Services; with the iptables one kube-proxy does.
func (s *dataplaneSwitch) OnLoadBalancerUpdate(lb *calc.LoadBalancer) {
	if sd, ok := s.d.(calc.ServiceDataplane); ok && s.on() {
		sd.OnLoadBalancerUpdate(lb)
	}
}
