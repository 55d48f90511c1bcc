package calc

import "net/netip"

// NewExplainGraph makes a graph of no node, for explanations: feed it
// the cluster's state (OnUpdate) and ask Explain. No endpoint is local,
// so nothing is compiled until asked and nothing is sent anywhere.
func NewExplainGraph() *Graph { return NewGraph("", discard{}) }

// discard is a Dataplane that drops everything.
type discard struct{}

func (discard) OnConfigUpdate(*Config)                  {}
func (discard) OnIPSetUpdate(*IPSet)                    {}
func (discard) OnIPSetDelta(string, []string, []string) {}
func (discard) OnIPSetRemoved(string)                   {}
func (discard) OnPolicyUpdate(*Policy)                  {}
func (discard) OnPolicyRemoved(PolicyID)                {}
func (discard) OnProfileUpdate(*Profile)                {}
func (discard) OnProfileRemoved(string)                 {}
func (discard) OnEndpointUpdate(*Endpoint)              {}
func (discard) OnEndpointRemoved(EndpointID)            {}
func (discard) OnRouteUpdate(Route)                     {}
func (discard) OnRouteRemoved(netip.Prefix)             {}
func (discard) OnInSync()                               {}
