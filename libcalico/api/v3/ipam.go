package v3

// Kind names of the IPAM resources.
const (
	KindIPReservation         = "IPReservation"
	KindIPReservationList     = "IPReservationList"
	KindIPAMConfiguration     = "IPAMConfiguration"
	KindIPAMConfigurationList = "IPAMConfigurationList"
)

// IPReservation lists addresses that IPAM must never hand out
// automatically. Cluster-scoped.
type IPReservation struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       IPReservationSpec `json:"spec,omitempty"`
}

// IPReservationSpec holds the reserved CIDRs.
type IPReservationSpec struct {
	ReservedCIDRs []string `json:"reservedCIDRs,omitempty"`
}

// IPReservationList is a list of IP reservations.
type IPReservationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []IPReservation `json:"items"`
}

// Resources implements List.
func (l *IPReservationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *IPReservationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[IPReservation](KindIPReservationList, rs)
	return err
}

// IPAMConfigName is the only name an IPAMConfiguration may have.
const IPAMConfigName = "default"

// IPAMConfiguration holds cluster-wide IPAM settings; there is one, named
// "default". Cluster-scoped.
type IPAMConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       IPAMConfigurationSpec `json:"spec,omitempty"`
}

// IPAMConfigurationSpec is the IPAM settings.
type IPAMConfigurationSpec struct {
	// StrictAffinity forbids a node from borrowing addresses from blocks
	// affine to other nodes.
	StrictAffinity bool `json:"strictAffinity"`
	// MaxBlocksPerHost caps the blocks one node may claim; 0 is no limit.
	MaxBlocksPerHost int32 `json:"maxBlocksPerHost,omitempty"`
	// AutoAllocateBlocks lets nodes claim new blocks automatically; true
	// when unset.
	AutoAllocateBlocks *bool `json:"autoAllocateBlocks,omitempty"`
	// IPCooldownSeconds keeps a released address out of use this long.
	IPCooldownSeconds *int32 `json:"ipCooldownSeconds,omitempty"`
	// KubeVirtVMAddressPersistence is Enabled or Disabled: whether a
	// KubeVirt VM keeps its address across restarts and migrations.
	KubeVirtVMAddressPersistence *string `json:"kubeVirtVMAddressPersistence,omitempty"`
}

// IPAMConfigurationList is a list of IPAM configurations.
type IPAMConfigurationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []IPAMConfiguration `json:"items"`
}

// Resources implements List.
func (l *IPAMConfigurationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *IPAMConfigurationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[IPAMConfiguration](KindIPAMConfigurationList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindIPReservation, ListKind: KindIPReservationList, Plural: "ipreservations", Stored: true,
		Aliases: []string{"ipreservation", "ipreservations"},
		New: func() Resource {
			return &IPReservation{TypeMeta: TypeMeta{Kind: KindIPReservation, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &IPReservationList{TypeMeta: TypeMeta{Kind: KindIPReservationList, APIVersion: APIVersion}}
		},
	})
	registerKind(KindInfo{
		Kind: KindIPAMConfiguration, ListKind: KindIPAMConfigurationList, Plural: "ipamconfigurations", Stored: true,
		Aliases: []string{"ipamconfiguration", "ipamconfigurations", "ipamconfig", "ipamconfigs"},
		New: func() Resource {
			return &IPAMConfiguration{TypeMeta: TypeMeta{Kind: KindIPAMConfiguration, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &IPAMConfigurationList{TypeMeta: TypeMeta{Kind: KindIPAMConfigurationList, APIVersion: APIVersion}}
		},
	})
}
