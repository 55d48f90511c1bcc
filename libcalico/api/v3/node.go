package v3

import "github.com/palisade-net/palisade/libcalico/api/numorstring"

// Kind names of nodes.
const (
	KindNode     = "Node"
	KindNodeList = "NodeList"
)

// Node is a host running calico-node: its BGP identity and tunnel
// addresses. Cluster-scoped.
type Node struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       NodeSpec   `json:"spec,omitempty"`
	Status     NodeStatus `json:"status"`
}

// NodeSpec is the configuration of a node.
type NodeSpec struct {
	// BGP is the node's BGP identity; absent when the node runs no BGP.
	BGP *NodeBGPSpec `json:"bgp,omitempty"`
	// Addresses lists the node's known addresses.
	Addresses []NodeAddress `json:"addresses,omitempty"`
	// IPv4VXLANTunnelAddr and IPv6VXLANTunnelAddr are the addresses of the
	// node's VXLAN devices; VXLANTunnelMACAddr(V6) their MAC addresses.
	IPv4VXLANTunnelAddr  string `json:"ipv4VXLANTunnelAddr,omitempty"`
	VXLANTunnelMACAddr   string `json:"vxlanTunnelMACAddr,omitempty"`
	IPv6VXLANTunnelAddr  string `json:"ipv6VXLANTunnelAddr,omitempty"`
	VXLANTunnelMACAddrV6 string `json:"vxlanTunnelMACAddrV6,omitempty"`
	// OrchRefs ties the node to its name in each orchestrator.
	OrchRefs []OrchRef `json:"orchRefs,omitempty"`
	// Wireguard holds the node's WireGuard interface addresses.
	Wireguard *NodeWireguardSpec `json:"wireguard,omitempty"`
}

// NodeBGPSpec is a node's BGP identity.
type NodeBGPSpec struct {
	// ASNumber overrides the cluster's AS number for this node.
	ASNumber *numorstring.ASNumber `json:"asNumber,omitempty"`
	// IPv4Address and IPv6Address are the node's addresses with their
	// subnet ("10.0.0.1/24"); they are its BGP router addresses.
	IPv4Address string `json:"ipv4Address,omitempty"`
	IPv6Address string `json:"ipv6Address,omitempty"`
	// IPv4IPIPTunnelAddr is the address of the node's IP-in-IP device.
	IPv4IPIPTunnelAddr string `json:"ipv4IPIPTunnelAddr,omitempty"`
	// RouteReflectorClusterID makes the node a route reflector with this
	// cluster ID (an IPv4 address).
	RouteReflectorClusterID string `json:"routeReflectorClusterID,omitempty"`
}

// NodeAddress is one address of a node.
type NodeAddress struct {
	Address string          `json:"address"`
	Type    NodeAddressType `json:"type,omitempty"`
}

// NodeAddressType says where a node address comes from.
type NodeAddressType string

// Node address types.
const (
	NodeAddressInternalIP   NodeAddressType = "InternalIP"
	NodeAddressExternalIP   NodeAddressType = "ExternalIP"
	NodeAddressCalicoNodeIP NodeAddressType = "CalicoNodeIP"
)

// OrchRef is a node's name in one orchestrator.
type OrchRef struct {
	NodeName     string `json:"nodeName,omitempty"`
	Orchestrator string `json:"orchestrator"`
}

// NodeWireguardSpec holds the addresses of a node's WireGuard interfaces.
type NodeWireguardSpec struct {
	InterfaceIPv4Address string `json:"interfaceIPv4Address,omitempty"`
	InterfaceIPv6Address string `json:"interfaceIPv6Address,omitempty"`
}

// NodeStatus is what calico-node reports about itself.
type NodeStatus struct {
	WireguardPublicKey   string   `json:"wireguardPublicKey,omitempty"`
	WireguardPublicKeyV6 string   `json:"wireguardPublicKeyV6,omitempty"`
	PodCIDRs             []string `json:"podCIDRs,omitempty"`
}

// NodeList is a list of nodes.
type NodeList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []Node `json:"items"`
}

// Resources implements List.
func (l *NodeList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *NodeList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[Node](KindNodeList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindNode, ListKind: KindNodeList, Plural: "nodes", Stored: true,
		Aliases: []string{"node", "nodes", "no", "nos"},
		New:     func() Resource { return &Node{TypeMeta: TypeMeta{Kind: KindNode, APIVersion: APIVersion}} },
		NewList: func() List { return &NodeList{TypeMeta: TypeMeta{Kind: KindNodeList, APIVersion: APIVersion}} },
	})
}
