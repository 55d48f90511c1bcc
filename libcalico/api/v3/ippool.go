package v3

// Kind names of IP pools.
const (
	KindIPPool     = "IPPool"
	KindIPPoolList = "IPPoolList"
)

// IPPool is a range of addresses from which workload (and tunnel) addresses
// are allocated. Cluster-scoped.
type IPPool struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       IPPoolSpec `json:"spec,omitempty"`
}

// IPPoolSpec is the desired state of an IP pool.
type IPPoolSpec struct {
	// CIDR is the pool's network, for example 192.168.0.0/16.
	CIDR string `json:"cidr"`
	// VXLANMode says when to encapsulate traffic to workloads in this pool
	// with VXLAN: Never (default), Always or CrossSubnet.
	VXLANMode EncapMode `json:"vxlanMode,omitempty"`
	// IPIPMode says when to encapsulate with IP-in-IP: Never (default),
	// Always or CrossSubnet.
	IPIPMode EncapMode `json:"ipipMode,omitempty"`
	// NATOutgoing masquerades traffic from the pool to destinations outside
	// all pools.
	NATOutgoing bool `json:"natOutgoing,omitempty"`
	// Disabled stops new allocations from the pool.
	Disabled bool `json:"disabled,omitempty"`
	// DisableBGPExport stops the pool's routes being advertised over BGP.
	DisableBGPExport bool `json:"disableBGPExport,omitempty"`
	// BlockSize is the prefix length of the blocks handed to nodes: 26 for
	// IPv4 and 122 for IPv6 by default.
	BlockSize int `json:"blockSize,omitempty"`
	// NodeSelector chooses the nodes that allocate from this pool; "all()"
	// by default.
	NodeSelector string `json:"nodeSelector,omitempty"`
	// NamespaceSelector chooses the namespaces whose workloads may use the
	// pool; empty is every namespace.
	NamespaceSelector string `json:"namespaceSelector,omitempty"`
	// AllowedUses lists what addresses from the pool may be used for;
	// [Workload, Tunnel] by default.
	AllowedUses []IPPoolAllowedUse `json:"allowedUses,omitempty"`
	// AssignmentMode is Automatic (default) or Manual: Manual pools are
	// used only when an address is requested from them explicitly.
	AssignmentMode *AssignmentMode `json:"assignmentMode,omitempty"`

	// IPIP is the deprecated v1-style IP-in-IP setting; use IPIPMode.
	IPIP *IPIPConfiguration `json:"ipip,omitempty"`
	// NATOutgoingV1 is the deprecated v1 spelling of NATOutgoing.
	NATOutgoingV1 bool `json:"nat-outgoing,omitempty"`
}

// IPIPConfiguration is the deprecated IP-in-IP block of an IP pool.
type IPIPConfiguration struct {
	Enabled bool      `json:"enabled,omitempty"`
	Mode    EncapMode `json:"mode,omitempty"`
}

// EncapMode is when to encapsulate traffic: Always, CrossSubnet or Never.
type EncapMode string

// Encapsulation modes.
const (
	EncapAlways      EncapMode = "Always"
	EncapCrossSubnet EncapMode = "CrossSubnet"
	EncapNever       EncapMode = "Never"
)

// IPPoolAllowedUse is one use an IP pool's addresses may be put to.
type IPPoolAllowedUse string

// Allowed uses of an IP pool.
const (
	IPPoolAllowedUseWorkload     IPPoolAllowedUse = "Workload"
	IPPoolAllowedUseTunnel       IPPoolAllowedUse = "Tunnel"
	IPPoolAllowedUseLoadBalancer IPPoolAllowedUse = "LoadBalancer"
)

// AssignmentMode is how addresses are assigned from a pool.
type AssignmentMode string

// Assignment modes.
const (
	AssignmentAutomatic AssignmentMode = "Automatic"
	AssignmentManual    AssignmentMode = "Manual"
)

// IPPoolList is a list of IP pools.
type IPPoolList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []IPPool `json:"items"`
}

// Resources implements List.
func (l *IPPoolList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *IPPoolList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[IPPool](KindIPPoolList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindIPPool, ListKind: KindIPPoolList, Plural: "ippools", Stored: true,
		Aliases: []string{"ippool", "ippools", "ipp", "ipps", "pool", "pools"},
		New:     func() Resource { return &IPPool{TypeMeta: TypeMeta{Kind: KindIPPool, APIVersion: APIVersion}} },
		NewList: func() List { return &IPPoolList{TypeMeta: TypeMeta{Kind: KindIPPoolList, APIVersion: APIVersion}} },
	})
}
