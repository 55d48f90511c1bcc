package calc

import (
	"errors"
	"fmt"
)

// The question an explanation answers (Query, End) and the answer
// (Explanation: its Sides, their Stages, the Peers resolved).

// End names one end of a packet: a pod or WorkloadEndpoint (Namespace
// and Name: the pod's name, or the WorkloadEndpoint's), a HostEndpoint
// (Name only), or an address (Address).
type End struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Address   string `json:"address,omitempty"`
}

func (e End) String() string {
	switch {
	case e.Address != "":
		return e.Address
	case e.Namespace != "":
		return e.Namespace + "/" + e.Name
	}
	return e.Name
}

// Query is a packet to explain: its ends, protocol and ports (or ICMP
// type and code).
type Query struct {
	From     End   `json:"from"`
	To       End   `json:"to"`
	Protocol uint8 `json:"protocol"`
	// SrcPort and DstPort are the ports of a protocol with ports.
	SrcPort uint16 `json:"srcPort,omitempty"`
	DstPort uint16 `json:"dstPort,omitempty"`
	// ICMPType and ICMPCode are those of an ICMP or ICMPv6 packet.
	ICMPType uint8 `json:"icmpType,omitempty"`
	ICMPCode uint8 `json:"icmpCode,omitempty"`
	// Hosts maps the nodes' own addresses (Node resources) to the nodes'
	// names: an address no endpoint holds that is one of them is that
	// node's host.
	Hosts map[string]string `json:"hosts,omitempty"`
}

// Peer kinds.
const (
	PeerWorkload = "WorkloadEndpoint"
	PeerHostEP   = "HostEndpoint"
	PeerHost     = "Host"
	PeerExternal = "External"
	// PeerService is a Service address with no backend (the packet is
	// refused before any policy).
	PeerService = "Service"
)

// Peer is one end as it was resolved.
type Peer struct {
	// Kind is WorkloadEndpoint, HostEndpoint, Host (a node's own address
	// that no host endpoint holds), External (outside every IP pool) or
	// Service (a Service address without endpoints).
	Kind      string            `json:"kind"`
	Namespace string            `json:"namespace,omitempty"`
	Name      string            `json:"name,omitempty"`
	Pod       string            `json:"pod,omitempty"`
	Node      string            `json:"node,omitempty"`
	Interface string            `json:"interface,omitempty"`
	Address   string            `json:"address"`
	Labels    map[string]string `json:"labels,omitempty"`
}

func (p Peer) String() string {
	switch p.Kind {
	case PeerWorkload:
		name := p.Namespace + "/" + p.Name
		if p.Pod != "" {
			name = "pod " + p.Namespace + "/" + p.Pod
		}
		return fmt.Sprintf("%s (%s on %s)", name, p.Address, p.Node)
	case PeerHostEP:
		return fmt.Sprintf("host endpoint %s (%s on %s)", p.Name, p.Address, p.Node)
	case PeerHost:
		return fmt.Sprintf("host %s (%s)", p.Node, p.Address)
	case PeerService:
		return fmt.Sprintf("Service address %s (no endpoints)", p.Address)
	}
	return fmt.Sprintf("%s (outside the cluster)", p.Address)
}

// Stage names, in the order a packet meets them.
const (
	StageNeighbourDiscovery = "neighbour-discovery"
	StageFailsafe           = "failsafe"
	StageUntracked          = "untracked"
	StagePreDNAT            = "preDNAT"
	StageForward            = "forward"
	StagePolicy             = "policy"
	StageEndpointToHost     = "endpoint-to-host"
	StageNotPoliced         = "not-policed"
)

// Stage is one step of a side: a chain of policy, or a fixed rule.
type Stage struct {
	Name string `json:"name"`
	// Endpoint names the host endpoint of a failsafe, untracked, preDNAT
	// or forward stage.
	Endpoint string `json:"endpoint,omitempty"`
	Chain    *Chain `json:"chain,omitempty"`
	// Verdict is the stage's; Final says an Allow ends the side (an
	// Allow of an untracked or preDNAT stage of a forwarded packet only
	// lets it go on to the next stage).
	Verdict Verdict  `json:"verdict"`
	Final   bool     `json:"final,omitempty"`
	Decider *Decider `json:"decider,omitempty"`
}

// Side is the policy one end applies: the source's egress, the
// destination's ingress.
type Side struct {
	// Direction is egress (the source's side) or ingress.
	Direction string   `json:"direction"`
	Endpoint  Peer     `json:"endpoint"`
	Node      string   `json:"node"`
	Stages    []Stage  `json:"stages"`
	Verdict   Verdict  `json:"verdict"`
	Decider   *Decider `json:"decider,omitempty"`
	// NotReached says an earlier side dropped the packet: this side is
	// what would apply, but the packet never gets here.
	NotReached bool `json:"notReached,omitempty"`
}

// PacketInfo is the packet explained.
type PacketInfo struct {
	Protocol        string `json:"protocol"`
	Source          string `json:"source"`
	Destination     string `json:"destination"`
	SourcePort      uint16 `json:"sourcePort,omitempty"`
	DestinationPort uint16 `json:"destinationPort,omitempty"`
	ICMPType        *uint8 `json:"icmpType,omitempty"`
	ICMPCode        *uint8 `json:"icmpCode,omitempty"`
}

// Explanation is the answer: each side walked, and the verdict (Allow
// only when every side allows).
type Explanation struct {
	Packet PacketInfo `json:"packet"`
	From   Peer       `json:"from"`
	To     Peer       `json:"to"`
	// Service is the translation of a packet to a Service address (the
	// packet and To are then the backend's).
	Service *ServiceTranslation `json:"service,omitempty"`
	Sides   []Side              `json:"sides"`
	Verdict Verdict             `json:"verdict"`
	// Notes name what the explanation could not see.
	Notes []string `json:"notes,omitempty"`
	// Incomplete says the dataplane's verdict may differ (see Notes): a
	// host endpoint may be on the packet's path that the explanation
	// could not place there (one named only by its interface), or rules
	// outside felix's chains may decide (chainInsertMode Append,
	// iptablesFilterAllowAction Return).
	Incomplete bool `json:"incomplete,omitempty"`
	// Node is the node whose live state answered ("" for the datastore).
	Node string `json:"node,omitempty"`
}

// ErrBadQuery marks an error in the question (an end that does not
// exist, an address no endpoint holds, a protocol without the ports
// asked for), as opposed to a failure to answer.
var ErrBadQuery = errors.New("bad query")

func badQuery(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadQuery, fmt.Sprintf(format, a...))
}
