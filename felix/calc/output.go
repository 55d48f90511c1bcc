package calc

import (
	"net/netip"
	"strings"
)

// Dataplane receives the graph's output. Graph.Flush calls it in dependency
// order: configuration, then IP sets added or changed, then policies and
// profiles, then endpoints and routes; removals follow in reverse (routes and
// endpoints, then policies and profiles, then IP sets). Every value passed is
// owned by the receiver: the graph never touches it again.
type Dataplane interface {
	// OnConfigUpdate passes the merged configuration whenever it changes
	// (and once at the first Flush).
	OnConfigUpdate(cfg *Config)
	// OnIPSetUpdate passes the whole content of an IP set: on its first
	// appearance and whenever a delta would be larger than the set.
	OnIPSetUpdate(set *IPSet)
	// OnIPSetDelta adds and removes members of a set already passed.
	OnIPSetDelta(id string, added, removed []string)
	// OnIPSetRemoved says no active rule needs the set any more.
	OnIPSetRemoved(id string)
	// OnPolicyUpdate passes an active policy (one selecting at least one
	// local endpoint) whenever it changes.
	OnPolicyUpdate(p *Policy)
	OnPolicyRemoved(id PolicyID)
	// OnProfileUpdate passes a profile used by a local endpoint.
	OnProfileUpdate(p *Profile)
	OnProfileRemoved(name string)
	// OnEndpointUpdate passes a local endpoint with the tiers, policies
	// and profiles that apply to it.
	OnEndpointUpdate(ep *Endpoint)
	OnEndpointRemoved(id EndpointID)
	// OnRouteUpdate passes a route to a local workload address.
	OnRouteUpdate(r Route)
	OnRouteRemoved(dst netip.Prefix)
	// OnInSync is called once, at the first Flush after the syncer said
	// the datastore was read completely: from then on the dataplane may
	// remove what it does not know.
	OnInSync()
}

// Well-known IP set IDs holding the IP pools, for masquerade. Their
// members are pool CIDRs.
const (
	// IPSetMasqPools holds the CIDRs of pools with natOutgoing.
	IPSetMasqPools = "masq-ipam-pools"
	// IPSetAllPools holds the CIDRs of every pool.
	IPSetAllPools = "all-ipam-pools"
)

// IPSetType says what the members of a set look like.
type IPSetType string

const (
	// IPSetNet members are addresses ("10.0.0.1", "fd00::1") or CIDRs
	// ("10.0.0.0/24"), written as `ipset list` prints hash:net members:
	// a host prefix as the bare address.
	IPSetNet IPSetType = "hash:net"
	// IPSetIPPort members are "ip,proto:port" ("10.0.0.1,tcp:8080"), as
	// `ipset list` prints hash:ip,port members; proto is tcp, udp or sctp.
	IPSetIPPort IPSetType = "hash:ip,port"
)

// IPSet is one set of addresses a rule refers to. Members of both IP
// families are mixed; MemberIsIPv6 tells them apart so the dataplane can
// write a v4 and a v6 set.
type IPSet struct {
	// ID is stable: "s:<22 chars>" for selector sets (selector.UniqueID
	// for a plain selector), "n:<22 chars>" for named-port sets, or one of
	// the pool set IDs.
	ID      string
	Type    IPSetType
	Members []string
}

// MemberIsIPv6 reports whether a member string is an IPv6 one.
func MemberIsIPv6(m string) bool { return strings.Contains(beforeComma(m), ":") }

func beforeComma(s string) string {
	if i := strings.IndexByte(s, ','); i >= 0 {
		return s[:i]
	}
	return s
}

// Action is what a rule does when it matches.
type Action string

// Rule actions, as in projectcalico.org/v3.
const (
	Allow Action = "Allow"
	Deny  Action = "Deny"
	Log   Action = "Log"
	Pass  Action = "Pass"
)

// PortRange is an inclusive range of ports; a single port has Min == Max.
type PortRange struct{ Min, Max uint16 }

// Rule is one policy or profile rule in the form the renderers use: every
// selector, namespace selector, service-account match and network set
// has become IP set IDs, named ports have become ip,port IP set IDs.
// Matches within a rule are ANDed; list fields say how they combine.
type Rule struct {
	Action Action
	// IPVersion is 4 or 6 when the rule applies to one family only
	// (ipVersion, or an ICMP/ICMPv6 protocol), 0 for both. Nets of the
	// other family are dropped by the renderer for that family.
	IPVersion int
	// Protocol and NotProtocol are IANA numbers, 0 when absent.
	Protocol, NotProtocol uint8

	// Nets: the address must be in one of them (OR). NotNets: in none.
	SrcNets, NotSrcNets, DstNets, NotDstNets []netip.Prefix
	// IPSets: the address must be in every one of them (AND). NotIPSets:
	// in none of them.
	SrcIPSets, NotSrcIPSets, DstIPSets, NotDstIPSets []string
	// Ports and NamedPortIPSets together: the port must be in one of the
	// ranges OR the (address, port) in one of the named-port sets.
	// NotPorts / NotNamedPortIPSets: in none of them.
	SrcPorts, NotSrcPorts, DstPorts, NotDstPorts []PortRange
	SrcNamedPortIPSets, NotSrcNamedPortIPSets    []string
	DstNamedPortIPSets, NotDstNamedPortIPSets    []string
	ICMPType, ICMPCode, NotICMPType, NotICMPCode *uint8
	// Index is the rule's position in its policy (for logs and comments).
	Index int
	// Name is the rule's name annotation (the AdminNetworkPolicy or
	// BaselineAdminNetworkPolicy rule it came from), for explanations.
	Name string
}

// PolicyID names a policy: Namespace is empty for a GlobalNetworkPolicy.
type PolicyID struct {
	Tier      string
	Namespace string
	Name      string
}

// String is "namespace/name" for a NetworkPolicy and "name" for a
// GlobalNetworkPolicy; chain names hash it.
func (id PolicyID) String() string {
	if id.Namespace == "" {
		return id.Name
	}
	return id.Namespace + "/" + id.Name
}

// Policy is an active policy's rules.
type Policy struct {
	ID             PolicyID
	Order          *float64
	Inbound        []Rule
	Outbound       []Rule
	Ingress        bool // applies to ingress (types has Ingress)
	Egress         bool // applies to egress
	DoNotTrack     bool
	PreDNAT        bool
	ApplyOnForward bool
}

// Profile is a profile's rules.
type Profile struct {
	Name     string
	Inbound  []Rule
	Outbound []Rule
}

// EndpointKind tells workload and host endpoints apart.
type EndpointKind string

const (
	WorkloadEndpoint EndpointKind = "WorkloadEndpoint"
	HostEndpoint     EndpointKind = "HostEndpoint"
)

// EndpointID names a local endpoint.
type EndpointID struct {
	Kind      EndpointKind
	Namespace string
	Name      string
}

func (id EndpointID) String() string {
	if id.Namespace == "" {
		return string(id.Kind) + "/" + id.Name
	}
	return string(id.Kind) + "/" + id.Namespace + "/" + id.Name
}

// TierPolicies lists, for one tier, the policies that select an endpoint,
// in order, per direction. A tier with no policy in a direction is left
// out of that direction by the renderer.
type TierPolicies struct {
	Name string
	// DefaultAction is Deny or Pass: what happens at the end of the tier
	// when its policies select the endpoint but none decided.
	DefaultAction Action
	Ingress       []PolicyID
	Egress        []PolicyID
}

// Endpoint is a local endpoint and what applies to it.
type Endpoint struct {
	ID EndpointID
	// InterfaceName is the host-side interface (cali… for a workload; for
	// a host endpoint the interface, "*" for all, or empty when only
	// ExpectedIPs name it and the dataplane must find the interface).
	InterfaceName string
	IPv4Nets      []netip.Prefix
	IPv6Nets      []netip.Prefix
	MAC           string
	// AllowSpoofedSourcePrefixes (workloads only) are the sources the
	// workload may send from besides its own addresses; set only when
	// FelixConfiguration workloadSourceSpoofing is Any.
	AllowSpoofedSourcePrefixes []netip.Prefix
	// IPNATs (workloads only) are the floating IPs to DNAT to the
	// workload, from its ipNATs; set only when FelixConfiguration
	// floatingIPs is Enabled.
	IPNATs []NAT
	// Tiers are the normal policies (for a host endpoint: those for
	// traffic to and from the host itself).
	Tiers []TierPolicies
	// ForwardTiers (host endpoints only): applyOnForward policies, for
	// traffic forwarded through the interface.
	ForwardTiers []TierPolicies
	// PreDNATTiers and UntrackedTiers (host endpoints only): preDNAT and
	// doNotTrack policies.
	PreDNATTiers   []TierPolicies
	UntrackedTiers []TierPolicies
	// Profiles that exist, in the endpoint's order; they apply in a
	// direction only when no tier has a policy for it.
	Profiles []string
	// LocalBGPPeer (workloads only) names the BGPPeer whose
	// localWorkloadSelector makes the workload a BGP peer of this node;
	// PeeringAddrs are then the node-side addresses of the peering
	// (BGPConfiguration localWorkloadPeeringIPV4/IPV6, as /32 and /128),
	// which the dataplane puts on the workload's host interface.
	LocalBGPPeer string
	PeeringAddrs []netip.Prefix
}

// NAT is a one-to-one NAT: External (the floating IP) is translated to
// Internal, one of the workload's addresses of the same family.
type NAT struct {
	Internal, External netip.Addr
}

// HasPolicy reports whether any tier has a policy for the direction.
func HasPolicy(tiers []TierPolicies, ingress bool) bool {
	for _, t := range tiers {
		if ingress && len(t.Ingress) > 0 || !ingress && len(t.Egress) > 0 {
			return true
		}
	}
	return false
}

// Route is a route to a local workload address through its interface.
type Route struct {
	Dst   netip.Prefix
	Iface string
}
