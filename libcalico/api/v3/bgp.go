package v3

import "github.com/palisade-net/palisade/libcalico/api/numorstring"

// Kind names of the BGP resources.
const (
	KindBGPConfiguration     = "BGPConfiguration"
	KindBGPConfigurationList = "BGPConfigurationList"
	KindBGPPeer              = "BGPPeer"
	KindBGPPeerList          = "BGPPeerList"
	KindBGPFilter            = "BGPFilter"
	KindBGPFilterList        = "BGPFilterList"
)

// DefaultASNumber is the AS number nodes use when neither their Node nor the
// default BGPConfiguration sets one. Calico leaves the field unset in the
// resource and applies this number in its BGP layer.
const DefaultASNumber numorstring.ASNumber = 64512

// BGPConfiguration holds BGP settings: "default" for the whole cluster or
// "node.<name>" for one node. Cluster-scoped.
type BGPConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPConfigurationSpec `json:"spec,omitempty"`
}

// BGPConfigurationSpec is the content of a BGP configuration.
type BGPConfigurationSpec struct {
	// LogSeverityScreen is the BGP daemon's log level: Debug, Info,
	// Warning, Error or Fatal.
	LogSeverityScreen string `json:"logSeverityScreen,omitempty"`
	// NodeToNodeMeshEnabled peers every node with every other; true when
	// unset.
	NodeToNodeMeshEnabled *bool `json:"nodeToNodeMeshEnabled,omitempty"`
	// ASNumber is the default AS number of nodes; 64512 when unset.
	ASNumber *numorstring.ASNumber `json:"asNumber,omitempty"`
	// ServiceLoadBalancerIPs, ServiceExternalIPs and ServiceClusterIPs are
	// the service ranges advertised over BGP.
	ServiceLoadBalancerIPs []ServiceLoadBalancerIPBlock `json:"serviceLoadBalancerIPs,omitempty"`
	ServiceExternalIPs     []ServiceExternalIPBlock     `json:"serviceExternalIPs,omitempty"`
	ServiceClusterIPs      []ServiceClusterIPBlock      `json:"serviceClusterIPs,omitempty"`
	// ListenPort is the BGP listening port; 179 when unset.
	ListenPort uint16 `json:"listenPort,omitempty"`
	// NodeMeshPassword secures the node-to-node mesh sessions.
	NodeMeshPassword *BGPPassword `json:"nodeMeshPassword,omitempty"`
	// NodeMeshMaxRestartTime is the graceful restart time of mesh sessions.
	NodeMeshMaxRestartTime *Duration `json:"nodeMeshMaxRestartTime,omitempty"`
	// Communities defines named BGP community values.
	Communities []Community `json:"communities,omitempty"`
	// PrefixAdvertisements attaches communities to advertised prefixes.
	PrefixAdvertisements []PrefixAdvertisement `json:"prefixAdvertisements,omitempty"`
	// BindMode is None (listen on all addresses) or NodeIP.
	BindMode *BindMode `json:"bindMode,omitempty"`
	// IgnoredInterfaces lists interface globs whose routes are not exported.
	IgnoredInterfaces []string `json:"ignoredInterfaces,omitempty"`
	// LocalWorkloadPeeringIPV4/6 are the addresses local workloads peer with.
	LocalWorkloadPeeringIPV4 string `json:"localWorkloadPeeringIPV4,omitempty"`
	LocalWorkloadPeeringIPV6 string `json:"localWorkloadPeeringIPV6,omitempty"`
	// ProgramClusterRoutes is Enabled or Disabled.
	ProgramClusterRoutes *string `json:"programClusterRoutes,omitempty"`
	// ServiceLoadBalancerAggregation is Enabled (advertise the
	// serviceLoadBalancerIPs ranges) or Disabled (advertise each service
	// address).
	ServiceLoadBalancerAggregation *string `json:"serviceLoadBalancerAggregation,omitempty"`
	// IPv4NormalRoutePriority and IPv6NormalRoutePriority are the metrics
	// Felix gives workload routes, which BGP must know to recognise them.
	IPv4NormalRoutePriority *int `json:"ipv4NormalRoutePriority,omitempty"`
	IPv6NormalRoutePriority *int `json:"ipv6NormalRoutePriority,omitempty"`
}

// ServiceLoadBalancerIPBlock is a LoadBalancer service range to advertise.
type ServiceLoadBalancerIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// ServiceExternalIPBlock is an external IP service range to advertise.
type ServiceExternalIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// ServiceClusterIPBlock is a cluster IP service range to advertise.
type ServiceClusterIPBlock struct {
	CIDR string `json:"cidr,omitempty"`
}

// Community is a named BGP community value ("aa:nn" or "aa:nn:mm").
type Community struct {
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
}

// PrefixAdvertisement attaches communities (names or values) to a CIDR.
type PrefixAdvertisement struct {
	CIDR        string   `json:"cidr,omitempty"`
	Communities []string `json:"communities,omitempty"`
}

// BindMode is which addresses the BGP daemon listens on.
type BindMode string

// Bind modes.
const (
	BindModeNone   BindMode = "None"
	BindModeNodeIP BindMode = "NodeIP"
)

// BGPPassword is a BGP session password: read from a secret (as Calico
// does; calico-node reads it from <secrets dir>/<name>/<key>, the shape of
// a mounted Kubernetes secret) or, as a Palisade addition for clusters
// without secrets, given inline in value. Exactly one of the two is set.
type BGPPassword struct {
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
	Value        string             `json:"value,omitempty"`
}

// SecretKeySelector names one key of a Kubernetes secret.
type SecretKeySelector struct {
	Name     string `json:"name,omitempty"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional,omitempty"`
}

// BGPConfigurationList is a list of BGP configurations.
type BGPConfigurationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []BGPConfiguration `json:"items"`
}

// Resources implements List.
func (l *BGPConfigurationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *BGPConfigurationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[BGPConfiguration](KindBGPConfigurationList, rs)
	return err
}

// BGPPeer is a BGP session between some nodes and a peer. Cluster-scoped.
type BGPPeer struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPPeerSpec `json:"spec,omitempty"`
}

// BGPPeerSpec says which nodes peer with what.
type BGPPeerSpec struct {
	// Node is the one node that peers; empty with no NodeSelector means
	// every node (a global peer).
	Node string `json:"node,omitempty"`
	// PeerIP is the peer's address, optionally with a port
	// ("10.0.0.1:1790", "[aa::1]:1790").
	PeerIP string `json:"peerIP,omitempty"`
	// ASNumber is the peer's AS number.
	ASNumber numorstring.ASNumber `json:"asNumber,omitempty"`
	// NodeSelector chooses the nodes that peer (instead of Node).
	NodeSelector string `json:"nodeSelector,omitempty"`
	// PeerSelector chooses Calico nodes as peers (instead of PeerIP).
	PeerSelector string `json:"peerSelector,omitempty"`
	// KeepOriginalNextHop keeps the next hop of routes sent to this peer.
	KeepOriginalNextHop bool `json:"keepOriginalNextHop,omitempty"`
	// Password secures the session.
	Password *BGPPassword `json:"password,omitempty"`
	// SourceAddress is UseNodeIP (default) or None.
	SourceAddress SourceAddress `json:"sourceAddress,omitempty"`
	// MaxRestartTime is the graceful restart time.
	MaxRestartTime *Duration `json:"maxRestartTime,omitempty"`
	// NumAllowedLocalASNumbers is how many times our AS may appear in a
	// received AS path.
	NumAllowedLocalASNumbers *int32 `json:"numAllowedLocalASNumbers,omitempty"`
	// TTLSecurity enables GTSM with this many hops.
	TTLSecurity *uint8 `json:"ttlSecurity,omitempty"`
	// ReachableBy is a gateway address through which the peer is reached.
	ReachableBy string `json:"reachableBy,omitempty"`
	// Filters names the BGPFilters applied to this session, in order.
	Filters []string `json:"filters,omitempty"`
	// KeepaliveTime is the BGP keepalive interval.
	KeepaliveTime *Duration `json:"keepaliveTime,omitempty"`
	// NextHopMode is Auto, Self or Keep.
	NextHopMode *NextHopMode `json:"nextHopMode,omitempty"`
	// LocalWorkloadSelector chooses local workloads as peers.
	LocalWorkloadSelector string `json:"localWorkloadSelector,omitempty"`
	// ReversePeering is Auto or Manual.
	ReversePeering *ReversePeering `json:"reversePeering,omitempty"`
	// LocalASNumber is the AS number the node presents to this peer
	// instead of its own.
	LocalASNumber *numorstring.ASNumber `json:"localASNumber,omitempty"`
}

// SourceAddress is the source address a BGP session uses.
type SourceAddress string

// Source addresses.
const (
	SourceAddressUseNodeIP SourceAddress = "UseNodeIP"
	SourceAddressNone      SourceAddress = "None"
)

// NextHopMode is how next hops of routes sent to a peer are set.
type NextHopMode string

// Next hop modes.
const (
	NextHopAuto NextHopMode = "Auto"
	NextHopSelf NextHopMode = "Self"
	NextHopKeep NextHopMode = "Keep"
)

// ReversePeering is whether the peer selected by PeerSelector gets the
// reverse session automatically.
type ReversePeering string

// Reverse peering modes.
const (
	ReversePeeringAuto   ReversePeering = "Auto"
	ReversePeeringManual ReversePeering = "Manual"
)

// BGPPeerList is a list of BGP peers.
type BGPPeerList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []BGPPeer `json:"items"`
}

// Resources implements List.
func (l *BGPPeerList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *BGPPeerList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[BGPPeer](KindBGPPeerList, rs)
	return err
}

// BGPFilter is an ordered list of import and export rules that BGP peers
// refer to by name. Cluster-scoped.
type BGPFilter struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BGPFilterSpec `json:"spec,omitempty"`
}

// BGPFilterSpec holds the rules, per direction and address family.
type BGPFilterSpec struct {
	ExportV4 []BGPFilterRuleV4 `json:"exportV4,omitempty"`
	ImportV4 []BGPFilterRuleV4 `json:"importV4,omitempty"`
	ExportV6 []BGPFilterRuleV6 `json:"exportV6,omitempty"`
	ImportV6 []BGPFilterRuleV6 `json:"importV6,omitempty"`
}

// BGPFilterRuleV4 matches IPv4 routes.
type BGPFilterRuleV4 struct {
	CIDR          string                   `json:"cidr,omitempty"`
	PrefixLength  *BGPFilterPrefixLength   `json:"prefixLength,omitempty"`
	Source        BGPFilterMatchSource     `json:"source,omitempty"`
	Interface     string                   `json:"interface,omitempty"`
	MatchOperator BGPFilterMatchOperator   `json:"matchOperator,omitempty"`
	PeerType      BGPFilterPeerType        `json:"peerType,omitempty"`
	Communities   *BGPFilterCommunityMatch `json:"communities,omitempty"`
	ASPathPrefix  []numorstring.ASNumber   `json:"asPathPrefix,omitempty"`
	Priority      *int                     `json:"priority,omitempty"`
	Action        BGPFilterAction          `json:"action"`
	Operations    []BGPFilterOperation     `json:"operations,omitempty"`
}

// BGPFilterRuleV6 matches IPv6 routes.
type BGPFilterRuleV6 struct {
	CIDR          string                   `json:"cidr,omitempty"`
	PrefixLength  *BGPFilterPrefixLength   `json:"prefixLength,omitempty"`
	Source        BGPFilterMatchSource     `json:"source,omitempty"`
	Interface     string                   `json:"interface,omitempty"`
	MatchOperator BGPFilterMatchOperator   `json:"matchOperator,omitempty"`
	PeerType      BGPFilterPeerType        `json:"peerType,omitempty"`
	Communities   *BGPFilterCommunityMatch `json:"communities,omitempty"`
	ASPathPrefix  []numorstring.ASNumber   `json:"asPathPrefix,omitempty"`
	Priority      *int                     `json:"priority,omitempty"`
	Action        BGPFilterAction          `json:"action"`
	Operations    []BGPFilterOperation     `json:"operations,omitempty"`
}

// BGPFilterPrefixLength bounds the prefix length of matched routes.
type BGPFilterPrefixLength struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

// BGPFilterPeerType restricts a rule to peers of one kind.
type BGPFilterPeerType string

// Peer types.
const (
	BGPFilterPeerTypeEBGP BGPFilterPeerType = "eBGP"
	BGPFilterPeerTypeIBGP BGPFilterPeerType = "iBGP"
)

// BGPFilterCommunityMatch matches routes carrying a community.
type BGPFilterCommunityMatch struct {
	Values []string `json:"values"`
}

// BGPFilterOperation is one change made to an accepted route: exactly one
// of its fields is set.
type BGPFilterOperation struct {
	AddCommunity  *BGPFilterAddCommunity  `json:"addCommunity,omitempty"`
	PrependASPath *BGPFilterPrependASPath `json:"prependASPath,omitempty"`
	SetPriority   *BGPFilterSetPriority   `json:"setPriority,omitempty"`
}

// BGPFilterAddCommunity adds a community to the route.
type BGPFilterAddCommunity struct {
	Value string `json:"value"`
}

// BGPFilterPrependASPath prepends AS numbers to the route's AS path.
type BGPFilterPrependASPath struct {
	Prefix []numorstring.ASNumber `json:"prefix"`
}

// BGPFilterSetPriority sets the route's priority.
type BGPFilterSetPriority struct {
	Value int `json:"value"`
}

// BGPFilterMatchSource restricts a rule to routes of one origin.
type BGPFilterMatchSource string

// BGPFilterSourceRemotePeers matches routes learned from BGP peers.
const BGPFilterSourceRemotePeers BGPFilterMatchSource = "RemotePeers"

// BGPFilterMatchOperator compares a route with the rule's CIDR.
type BGPFilterMatchOperator string

// Match operators.
const (
	MatchOperatorEqual    BGPFilterMatchOperator = "Equal"
	MatchOperatorNotEqual BGPFilterMatchOperator = "NotEqual"
	MatchOperatorIn       BGPFilterMatchOperator = "In"
	MatchOperatorNotIn    BGPFilterMatchOperator = "NotIn"
)

// BGPFilterAction is what a matching filter rule does.
type BGPFilterAction string

// Filter actions.
const (
	BGPFilterAccept BGPFilterAction = "Accept"
	BGPFilterReject BGPFilterAction = "Reject"
)

// BGPFilterList is a list of BGP filters.
type BGPFilterList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []BGPFilter `json:"items"`
}

// Resources implements List.
func (l *BGPFilterList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *BGPFilterList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[BGPFilter](KindBGPFilterList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindBGPConfiguration, ListKind: KindBGPConfigurationList, Plural: "bgpconfigurations", Stored: true,
		Aliases: []string{"bgpconfiguration", "bgpconfigurations", "bgpconfig", "bgpconfigs"},
		New: func() Resource {
			return &BGPConfiguration{TypeMeta: TypeMeta{Kind: KindBGPConfiguration, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &BGPConfigurationList{TypeMeta: TypeMeta{Kind: KindBGPConfigurationList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindBGPPeer, ListKind: KindBGPPeerList, Plural: "bgppeers", Stored: true,
		Aliases: []string{"bgppeer", "bgppeers", "bgpp", "bgpps", "bp", "bps"},
		New:     func() Resource { return &BGPPeer{TypeMeta: TypeMeta{Kind: KindBGPPeer, APIVersion: APIVersion}} },
		NewList: func() List { return &BGPPeerList{TypeMeta: TypeMeta{Kind: KindBGPPeerList, APIVersion: APIVersion}} },
	})
	registerKind(KindInfo{
		Kind: KindBGPFilter, ListKind: KindBGPFilterList, Plural: "bgpfilters", Stored: true,
		Aliases: []string{"bgpfilter", "bgpfilters"},
		New:     func() Resource { return &BGPFilter{TypeMeta: TypeMeta{Kind: KindBGPFilter, APIVersion: APIVersion}} },
		NewList: func() List {
			return &BGPFilterList{TypeMeta: TypeMeta{Kind: KindBGPFilterList, APIVersion: APIVersion}}
		},
	})
}
