package v3

import "github.com/palisade-net/palisade/libcalico/api/numorstring"

// Kind names of endpoints.
const (
	KindWorkloadEndpoint     = "WorkloadEndpoint"
	KindWorkloadEndpointList = "WorkloadEndpointList"
	KindHostEndpoint         = "HostEndpoint"
	KindHostEndpointList     = "HostEndpointList"
)

// WorkloadEndpoint is one network interface of a workload (a pod's eth0).
// Namespaced.
type WorkloadEndpoint struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       WorkloadEndpointSpec `json:"spec,omitempty"`
}

// WorkloadEndpointSpec describes a workload interface.
type WorkloadEndpointSpec struct {
	Orchestrator string `json:"orchestrator,omitempty"`
	Workload     string `json:"workload,omitempty"`
	Node         string `json:"node,omitempty"`
	ContainerID  string `json:"containerID,omitempty"`
	Pod          string `json:"pod,omitempty"`
	// Endpoint is the interface name inside the workload ("eth0").
	Endpoint           string `json:"endpoint,omitempty"`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// IPNetworks are the workload's addresses as CIDRs ("10.0.0.1/32").
	IPNetworks []string `json:"ipNetworks,omitempty"`
	// IPNATs maps workload addresses to floating external addresses.
	IPNATs      []IPNAT `json:"ipNATs,omitempty"`
	IPv4Gateway string  `json:"ipv4Gateway,omitempty"`
	IPv6Gateway string  `json:"ipv6Gateway,omitempty"`
	// Profiles apply in order after the policies.
	Profiles []string `json:"profiles,omitempty"`
	// InterfaceName is the host side of the interface ("cali0123456789a").
	InterfaceName string `json:"interfaceName,omitempty"`
	// MAC is the workload side MAC address.
	MAC string `json:"mac,omitempty"`
	// Ports are the named ports the workload exposes.
	Ports []WorkloadEndpointPort `json:"ports,omitempty"`
	// AllowSpoofedSourcePrefixes lets the workload send from these
	// prefixes as well as from its own addresses.
	AllowSpoofedSourcePrefixes []string `json:"allowSpoofedSourcePrefixes,omitempty"`
	// QoSControls limits the workload's bandwidth, packet rate and
	// connections.
	QoSControls *QoSControls `json:"qosControls,omitempty"`
}

// QoSControls are a workload's traffic limits, as Calico's.
type QoSControls struct {
	IngressBandwidth      int64 `json:"ingressBandwidth,omitempty"`
	EgressBandwidth       int64 `json:"egressBandwidth,omitempty"`
	IngressBurst          int64 `json:"ingressBurst,omitempty"`
	EgressBurst           int64 `json:"egressBurst,omitempty"`
	IngressPeakrate       int64 `json:"ingressPeakrate,omitempty"`
	EgressPeakrate        int64 `json:"egressPeakrate,omitempty"`
	IngressMinburst       int64 `json:"ingressMinburst,omitempty"`
	EgressMinburst        int64 `json:"egressMinburst,omitempty"`
	IngressPacketRate     int64 `json:"ingressPacketRate,omitempty"`
	EgressPacketRate      int64 `json:"egressPacketRate,omitempty"`
	IngressPacketBurst    int64 `json:"ingressPacketBurst,omitempty"`
	EgressPacketBurst     int64 `json:"egressPacketBurst,omitempty"`
	IngressMaxConnections int64 `json:"ingressMaxConnections,omitempty"`
	EgressMaxConnections  int64 `json:"egressMaxConnections,omitempty"`
}

// IPNAT is a one-to-one NAT from an external to a workload address.
type IPNAT struct {
	InternalIP string `json:"internalIP"`
	ExternalIP string `json:"externalIP"`
}

// WorkloadEndpointPort is a named port of a workload.
type WorkloadEndpointPort struct {
	Name     string               `json:"name"`
	Protocol numorstring.Protocol `json:"protocol"`
	Port     uint16               `json:"port"`
	HostPort uint16               `json:"hostPort"`
	HostIP   string               `json:"hostIP"`
}

// WorkloadEndpointList is a list of workload endpoints.
type WorkloadEndpointList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []WorkloadEndpoint `json:"items"`
}

// Resources implements List.
func (l *WorkloadEndpointList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *WorkloadEndpointList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[WorkloadEndpoint](KindWorkloadEndpointList, rs)
	return err
}

// HostEndpoint is a host interface (or, with interfaceName "*", all of a
// host's interfaces) that policy applies to. Cluster-scoped.
type HostEndpoint struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       HostEndpointSpec `json:"spec,omitempty"`
}

// HostEndpointSpec describes a host interface.
type HostEndpointSpec struct {
	Node string `json:"node,omitempty"`
	// InterfaceName is the interface, or "*" for all of the host's
	// interfaces; when empty, ExpectedIPs identify the interface.
	InterfaceName string         `json:"interfaceName,omitempty"`
	ExpectedIPs   []string       `json:"expectedIPs,omitempty"`
	Profiles      []string       `json:"profiles,omitempty"`
	Ports         []EndpointPort `json:"ports,omitempty"`
}

// EndpointPort is a named port of a host endpoint.
type EndpointPort struct {
	Name     string               `json:"name"`
	Protocol numorstring.Protocol `json:"protocol"`
	Port     uint16               `json:"port"`
}

// HostEndpointList is a list of host endpoints.
type HostEndpointList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []HostEndpoint `json:"items"`
}

// Resources implements List.
func (l *HostEndpointList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *HostEndpointList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[HostEndpoint](KindHostEndpointList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindWorkloadEndpoint, ListKind: KindWorkloadEndpointList, Plural: "workloadendpoints",
		Namespaced: true, Stored: true,
		Aliases: []string{"workloadendpoint", "workloadendpoints", "wep", "weps"},
		New: func() Resource {
			return &WorkloadEndpoint{TypeMeta: TypeMeta{Kind: KindWorkloadEndpoint, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &WorkloadEndpointList{TypeMeta: TypeMeta{Kind: KindWorkloadEndpointList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindHostEndpoint, ListKind: KindHostEndpointList, Plural: "hostendpoints", Stored: true,
		Aliases: []string{"hostendpoint", "hostendpoints", "hep", "heps"},
		New: func() Resource {
			return &HostEndpoint{TypeMeta: TypeMeta{Kind: KindHostEndpoint, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &HostEndpointList{TypeMeta: TypeMeta{Kind: KindHostEndpointList, APIVersion: APIVersion}}
		},
	})
}
