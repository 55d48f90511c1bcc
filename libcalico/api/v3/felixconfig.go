package v3

import "github.com/palisade-net/palisade/libcalico/api/numorstring"

// Kind names of Felix configurations.
const (
	KindFelixConfiguration     = "FelixConfiguration"
	KindFelixConfigurationList = "FelixConfigurationList"
)

// FelixConfiguration holds policy agent settings: "default" for the whole
// cluster or "node.<name>" for one node. Unset fields keep Felix's
// defaults. Cluster-scoped.
type FelixConfiguration struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       FelixConfigurationSpec `json:"spec,omitempty"`
}

// FelixConfigurationSpec is the agent's settings. Every field is optional.
type FelixConfigurationSpec struct {
	// NodeSelector makes a configuration named other than "default" or
	// "node.<name>" apply to the nodes it selects.
	NodeSelector string `json:"nodeSelector,omitempty"`

	UseInternalDataplaneDriver *bool  `json:"useInternalDataplaneDriver,omitempty"`
	DataplaneDriver            string `json:"dataplaneDriver,omitempty"`

	// IPv6Support enables IPv6 policy and routing.
	IPv6Support *bool `json:"ipv6Support,omitempty"`

	// Refresh intervals of the dataplane drivers.
	RouteRefreshInterval           *Duration `json:"routeRefreshInterval,omitempty"`
	InterfaceRefreshInterval       *Duration `json:"interfaceRefreshInterval,omitempty"`
	IptablesRefreshInterval        *Duration `json:"iptablesRefreshInterval,omitempty"`
	IptablesPostWriteCheckInterval *Duration `json:"iptablesPostWriteCheckInterval,omitempty"`
	IptablesLockFilePath           string    `json:"iptablesLockFilePath,omitempty"`
	IptablesLockTimeout            *Duration `json:"iptablesLockTimeout,omitempty"`
	IptablesLockProbeInterval      *Duration `json:"iptablesLockProbeInterval,omitempty"`
	IpsetsRefreshInterval          *Duration `json:"ipsetsRefreshInterval,omitempty"`
	MaxIpsetSize                   *int      `json:"maxIpsetSize,omitempty"`
	// IptablesBackend is Auto, NFT or Legacy.
	IptablesBackend    *IptablesBackend `json:"iptablesBackend,omitempty"`
	XDPRefreshInterval *Duration        `json:"xdpRefreshInterval,omitempty"`
	NetlinkTimeout     *Duration        `json:"netlinkTimeout,omitempty"`

	MetadataAddr    string `json:"metadataAddr,omitempty"`
	MetadataPort    *int   `json:"metadataPort,omitempty"`
	OpenstackRegion string `json:"openstackRegion,omitempty"`

	// InterfacePrefix is the prefix of workload interfaces ("cali").
	InterfacePrefix string `json:"interfacePrefix,omitempty"`
	// InterfaceExclude is a comma-separated list of interface names (or
	// /regexes/) that are never host endpoints.
	InterfaceExclude string `json:"interfaceExclude,omitempty"`

	// ChainInsertMode is Insert (default) or Append.
	ChainInsertMode string `json:"chainInsertMode,omitempty"`
	// DefaultEndpointToHostAction is Drop (default), Return or Accept.
	DefaultEndpointToHostAction string `json:"defaultEndpointToHostAction,omitempty"`
	// IptablesFilterAllowAction and IptablesMangleAllowAction are Accept or
	// Return; IptablesFilterDenyAction is Drop or Reject.
	IptablesFilterAllowAction string `json:"iptablesFilterAllowAction,omitempty"`
	IptablesMangleAllowAction string `json:"iptablesMangleAllowAction,omitempty"`
	IptablesFilterDenyAction  string `json:"iptablesFilterDenyAction,omitempty"`

	LogPrefix             string `json:"logPrefix,omitempty"`
	LogFilePath           string `json:"logFilePath,omitempty"`
	LogSeverityFile       string `json:"logSeverityFile,omitempty"`
	LogSeverityScreen     string `json:"logSeverityScreen,omitempty"`
	LogSeveritySys        string `json:"logSeveritySys,omitempty"`
	LogDebugFilenameRegex string `json:"logDebugFilenameRegex,omitempty"`

	IPIPEnabled                    *bool `json:"ipipEnabled,omitempty"`
	IPIPMTU                        *int  `json:"ipipMTU,omitempty"`
	VXLANEnabled                   *bool `json:"vxlanEnabled,omitempty"`
	VXLANMTU                       *int  `json:"vxlanMTU,omitempty"`
	VXLANMTUV6                     *int  `json:"vxlanMTUV6,omitempty"`
	VXLANPort                      *int  `json:"vxlanPort,omitempty"`
	VXLANVNI                       *int  `json:"vxlanVNI,omitempty"`
	AllowVXLANPacketsFromWorkloads *bool `json:"allowVXLANPacketsFromWorkloads,omitempty"`
	AllowIPIPPacketsFromWorkloads  *bool `json:"allowIPIPPacketsFromWorkloads,omitempty"`

	ReportingInterval        *Duration `json:"reportingInterval,omitempty"`
	ReportingTTL             *Duration `json:"reportingTTL,omitempty"`
	EndpointReportingEnabled *bool     `json:"endpointReportingEnabled,omitempty"`
	EndpointReportingDelay   *Duration `json:"endpointReportingDelay,omitempty"`

	// IptablesMarkMask is the mask of packet mark bits Felix may use.
	IptablesMarkMask             *uint32 `json:"iptablesMarkMask,omitempty"`
	DisableConntrackInvalidCheck *bool   `json:"disableConntrackInvalidCheck,omitempty"`

	HealthEnabled                     *bool   `json:"healthEnabled,omitempty"`
	HealthHost                        *string `json:"healthHost,omitempty"`
	HealthPort                        *int    `json:"healthPort,omitempty"`
	PrometheusMetricsEnabled          *bool   `json:"prometheusMetricsEnabled,omitempty"`
	PrometheusMetricsHost             string  `json:"prometheusMetricsHost,omitempty"`
	PrometheusMetricsPort             *int    `json:"prometheusMetricsPort,omitempty"`
	PrometheusGoMetricsEnabled        *bool   `json:"prometheusGoMetricsEnabled,omitempty"`
	PrometheusProcessMetricsEnabled   *bool   `json:"prometheusProcessMetricsEnabled,omitempty"`
	PrometheusWireGuardMetricsEnabled *bool   `json:"prometheusWireGuardMetricsEnabled,omitempty"`

	// FailsafeInboundHostPorts and FailsafeOutboundHostPorts are always
	// allowed to and from host endpoints.
	FailsafeInboundHostPorts  *[]ProtoPort `json:"failsafeInboundHostPorts,omitempty"`
	FailsafeOutboundHostPorts *[]ProtoPort `json:"failsafeOutboundHostPorts,omitempty"`

	KubeNodePortRanges *[]numorstring.Port `json:"kubeNodePortRanges,omitempty"`

	PolicySyncPathPrefix string `json:"policySyncPathPrefix,omitempty"`

	UsageReportingEnabled      *bool     `json:"usageReportingEnabled,omitempty"`
	UsageReportingInitialDelay *Duration `json:"usageReportingInitialDelay,omitempty"`
	UsageReportingInterval     *Duration `json:"usageReportingInterval,omitempty"`

	NATPortRange                       *numorstring.Port `json:"natPortRange,omitempty"`
	NATOutgoingAddress                 string            `json:"natOutgoingAddress,omitempty"`
	IptablesNATOutgoingInterfaceFilter string            `json:"iptablesNATOutgoingInterfaceFilter,omitempty"`

	DeviceRouteSourceAddress     string    `json:"deviceRouteSourceAddress,omitempty"`
	DeviceRouteSourceAddressIPv6 string    `json:"deviceRouteSourceAddressIPv6,omitempty"`
	DeviceRouteProtocol          *int      `json:"deviceRouteProtocol,omitempty"`
	RemoveExternalRoutes         *bool     `json:"removeExternalRoutes,omitempty"`
	ExternalNodesCIDRList        *[]string `json:"externalNodesList,omitempty"`

	DebugMemoryProfilePath  string `json:"debugMemoryProfilePath,omitempty"`
	DebugDisableLogDropping *bool  `json:"debugDisableLogDropping,omitempty"`

	XDPEnabled        *bool `json:"xdpEnabled,omitempty"`
	GenericXDPEnabled *bool `json:"genericXDPEnabled,omitempty"`

	BPFEnabled                         *bool     `json:"bpfEnabled,omitempty"`
	BPFDisableUnprivileged             *bool     `json:"bpfDisableUnprivileged,omitempty"`
	BPFLogLevel                        string    `json:"bpfLogLevel"`
	BPFDataIfacePattern                string    `json:"bpfDataIfacePattern,omitempty"`
	BPFConnectTimeLoadBalancingEnabled *bool     `json:"bpfConnectTimeLoadBalancingEnabled,omitempty"`
	BPFExternalServiceMode             string    `json:"bpfExternalServiceMode,omitempty"`
	BPFKubeProxyIptablesCleanupEnabled *bool     `json:"bpfKubeProxyIptablesCleanupEnabled,omitempty"`
	BPFKubeProxyMinSyncPeriod          *Duration `json:"bpfKubeProxyMinSyncPeriod,omitempty"`
	BPFExtToServiceConnmark            *int      `json:"bpfExtToServiceConnmark,omitempty"`
	BPFMapSizeConntrack                *int      `json:"bpfMapSizeConntrack,omitempty"`
	BPFAttachType                      string    `json:"bpfAttachType,omitempty"`

	// RouteSource is CalicoIPAM (default) or WorkloadIPs.
	RouteSource            string           `json:"routeSource,omitempty"`
	RouteTableRange        *RouteTableRange `json:"routeTableRange,omitempty"`
	ServiceLoopPrevention  string           `json:"serviceLoopPrevention,omitempty"`
	WorkloadSourceSpoofing string           `json:"workloadSourceSpoofing,omitempty"`
	MTUIfacePattern        string           `json:"mtuIfacePattern,omitempty"`

	WireguardEnabled               *bool     `json:"wireguardEnabled,omitempty"`
	WireguardEnabledV6             *bool     `json:"wireguardEnabledV6,omitempty"`
	WireguardListeningPort         *int      `json:"wireguardListeningPort,omitempty"`
	WireguardListeningPortV6       *int      `json:"wireguardListeningPortV6,omitempty"`
	WireguardRoutingRulePriority   *int      `json:"wireguardRoutingRulePriority,omitempty"`
	WireguardInterfaceName         string    `json:"wireguardInterfaceName,omitempty"`
	WireguardInterfaceNameV6       string    `json:"wireguardInterfaceNameV6,omitempty"`
	WireguardMTU                   *int      `json:"wireguardMTU,omitempty"`
	WireguardMTUV6                 *int      `json:"wireguardMTUV6,omitempty"`
	WireguardHostEncryptionEnabled *bool     `json:"wireguardHostEncryptionEnabled,omitempty"`
	WireguardKeepAlive             *Duration `json:"wireguardKeepAlive,omitempty"`

	AWSSrcDstCheck string `json:"awsSrcDstCheck,omitempty"`
	FloatingIPs    string `json:"floatingIPs,omitempty"`
	NFTablesMode   string `json:"nftablesMode,omitempty"`
	// NFTablesFlowTableOffload puts established flows of the nftables
	// dataplane in a flowtable: Enabled or Disabled.
	NFTablesFlowTableOffload *string `json:"nftablesFlowTableOffload,omitempty"`
	FeatureDetectOverride    string  `json:"featureDetectOverride,omitempty"`
	FeatureGates             string  `json:"featureGates,omitempty"`
	ProgramClusterRoutes     string  `json:"programClusterRoutes,omitempty"`

	// The fields below complete Calico's current FelixConfiguration API
	// so that a Calico export applies unchanged. Those Palisade does not
	// act on are listed in NotActedOn.
	DataplaneWatchdogTimeout *Duration               `json:"dataplaneWatchdogTimeout,omitempty"`
	HealthTimeoutOverrides   []HealthTimeoutOverride `json:"healthTimeoutOverrides,omitempty"`
	EndpointStatusPathPrefix string                  `json:"endpointStatusPathPrefix,omitempty"`
	// IPForwarding is Enabled or Disabled.
	IPForwarding string `json:"ipForwarding,omitempty"`
	// NATOutgoingExclusions is IPPoolsOnly or IPPoolsAndHostIPs.
	NATOutgoingExclusions *string `json:"natOutgoingExclusions,omitempty"`
	CgroupV2Path          string  `json:"cgroupV2Path,omitempty"`
	RequireMTUFile        *bool   `json:"requireMTUFile,omitempty"`

	DebugHost                        *string   `json:"debugHost,omitempty"`
	DebugPort                        *int      `json:"debugPort,omitempty"`
	DebugSimulateCalcGraphHangAfter  *Duration `json:"debugSimulateCalcGraphHangAfter,omitempty"`
	DebugSimulateDataplaneHangAfter  *Duration `json:"debugSimulateDataplaneHangAfter,omitempty"`
	DebugSimulateDataplaneApplyDelay *Duration `json:"debugSimulateDataplaneApplyDelay,omitempty"`
	SidecarAccelerationEnabled       *bool     `json:"sidecarAccelerationEnabled,omitempty"`

	NftablesRefreshInterval   *Duration `json:"nftablesRefreshInterval,omitempty"`
	NftablesFilterAllowAction string    `json:"nftablesFilterAllowAction,omitempty"`
	NftablesMangleAllowAction string    `json:"nftablesMangleAllowAction,omitempty"`
	NftablesFilterDenyAction  string    `json:"nftablesFilterDenyAction,omitempty"`
	NftablesMarkMask          *uint32   `json:"nftablesMarkMask,omitempty"`

	BPFConntrackLogLevel              string                `json:"bpfConntrackLogLevel,omitempty"`
	BPFConntrackCleanupMode           *string               `json:"bpfConntrackMode,omitempty"`
	BPFConntrackTimeouts              *BPFConntrackTimeouts `json:"bpfConntrackTimeouts,omitempty"`
	BPFLogFilters                     *map[string]string    `json:"bpfLogFilters,omitempty"`
	BPFCTLBLogFilter                  string                `json:"bpfCTLBLogFilter,omitempty"`
	BPFL3IfacePattern                 string                `json:"bpfL3IfacePattern,omitempty"`
	BPFConnectTimeLoadBalancing       *string               `json:"bpfConnectTimeLoadBalancing,omitempty"`
	BPFHostNetworkedNATWithoutCTLB    *string               `json:"bpfHostNetworkedNATWithoutCTLB,omitempty"`
	BPFDSROptoutCIDRs                 *[]string             `json:"bpfDSROptoutCIDRs,omitempty"`
	BPFKubeProxyEndpointSlicesEnabled *bool                 `json:"bpfKubeProxyEndpointSlicesEnabled,omitempty"`
	BPFKubeProxyHealthzPort           *int                  `json:"bpfKubeProxyHealthzPort,omitempty"`
	BPFPSNATPorts                     *numorstring.Port     `json:"bpfPSNATPorts,omitempty"`
	BPFMapSizeNATFrontend             *int                  `json:"bpfMapSizeNATFrontend,omitempty"`
	BPFMapSizeNATBackend              *int                  `json:"bpfMapSizeNATBackend,omitempty"`
	BPFMapSizeNATAffinity             *int                  `json:"bpfMapSizeNATAffinity,omitempty"`
	BPFMapSizeRoute                   *int                  `json:"bpfMapSizeRoute,omitempty"`
	BPFMapSizePerCPUConntrack         *int                  `json:"bpfMapSizePerCpuConntrack,omitempty"`
	BPFMapSizeConntrackScaling        string                `json:"bpfMapSizeConntrackScaling,omitempty"`
	BPFMapSizeConntrackCleanupQueue   *int                  `json:"bpfMapSizeConntrackCleanupQueue,omitempty"`
	BPFMapSizeIPSets                  *int                  `json:"bpfMapSizeIPSets,omitempty"`
	BPFMapSizeIfState                 *int                  `json:"bpfMapSizeIfState,omitempty"`
	BPFHostConntrackBypass            *bool                 `json:"bpfHostConntrackBypass,omitempty"`
	BPFEnforceRPF                     string                `json:"bpfEnforceRPF,omitempty"`
	BPFPolicyDebugEnabled             *bool                 `json:"bpfPolicyDebugEnabled,omitempty"`
	BPFForceTrackPacketsFromIfaces    *[]string             `json:"bpfForceTrackPacketsFromIfaces,omitempty"`
	BPFDisableGROForIfaces            string                `json:"bpfDisableGROForIfaces,omitempty"`
	BPFExcludeCIDRsFromNAT            *[]string             `json:"bpfExcludeCIDRsFromNAT,omitempty"`
	BPFExportBufferSizeMB             *int                  `json:"bpfExportBufferSizeMB,omitempty"`
	BPFRedirectToPeer                 string                `json:"bpfRedirectToPeer,omitempty"`
	BPFProfiling                      string                `json:"bpfProfiling,omitempty"`
	BPFMaglevMaxEndpointsPerService   *int                  `json:"bpfMaglevMaxEndpointsPerService,omitempty"`
	BPFMaglevMaxServices              *int                  `json:"bpfMaglevMaxServices,omitempty"`

	// BPFExpediteAttach is Palisade's own (Calico has no such field):
	// felix expedites the kernel's RCU grace periods (writing 1 to
	// /sys/kernel/rcu_expedited, and 0 after) only while it makes new TCX
	// links, which each wait for one under the rtnl lock. Default true;
	// a switch already at 1, or one felix cannot write, is left alone.
	BPFExpediteAttach *bool `json:"bpfExpediteAttach,omitempty"`

	FlowLogsFlushInterval        *Duration `json:"flowLogsFlushInterval,omitempty"`
	FlowLogsCollectorDebugTrace  *bool     `json:"flowLogsCollectorDebugTrace,omitempty"`
	FlowLogsGoldmaneServer       *string   `json:"flowLogsGoldmaneServer,omitempty"`
	FlowLogsLocalReporter        *string   `json:"flowLogsLocalReporter,omitempty"`
	FlowLogsPolicyEvaluationMode *string   `json:"flowLogsPolicyEvaluationMode,omitempty"`

	RouteTableRanges  *[]RouteTableIDRange `json:"routeTableRanges,omitempty"`
	RouteSyncDisabled *bool                `json:"routeSyncDisabled,omitempty"`

	IPv4NormalRoutePriority           *int      `json:"ipv4NormalRoutePriority,omitempty"`
	IPv4ElevatedRoutePriority         *int      `json:"ipv4ElevatedRoutePriority,omitempty"`
	IPv6NormalRoutePriority           *int      `json:"ipv6NormalRoutePriority,omitempty"`
	IPv6ElevatedRoutePriority         *int      `json:"ipv6ElevatedRoutePriority,omitempty"`
	LiveMigrationRouteConvergenceTime *Duration `json:"liveMigrationRouteConvergenceTime,omitempty"`

	WireguardThreadingEnabled  *bool   `json:"wireguardThreadingEnabled,omitempty"`
	WindowsManageFirewallRules *string `json:"windowsManageFirewallRules,omitempty"`

	GoGCThreshold   *int `json:"goGCThreshold,omitempty"`
	GoMemoryLimitMB *int `json:"goMemoryLimitMB,omitempty"`
	GoMaxProcs      *int `json:"goMaxProcs,omitempty"`
}

// HealthTimeoutOverride overrides the watchdog timeout of one Felix
// subcomponent.
type HealthTimeoutOverride struct {
	Name    string   `json:"name"`
	Timeout Duration `json:"timeout"`
}

// RouteTableIDRange is one range of RouteTableRanges.
type RouteTableIDRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// BPFConntrackTimeouts overrides eBPF conntrack timers; each is a
// duration or "Auto".
type BPFConntrackTimeouts struct {
	CreationGracePeriod *string `json:"creationGracePeriod,omitempty"`
	TCPSynSent          *string `json:"tcpSynSent,omitempty"`
	TCPEstablished      *string `json:"tcpEstablished,omitempty"`
	TCPFinsSeen         *string `json:"tcpFinsSeen,omitempty"`
	TCPResetSeen        *string `json:"tcpResetSeen,omitempty"`
	UDPTimeout          *string `json:"udpTimeout,omitempty"`
	GenericTimeout      *string `json:"genericTimeout,omitempty"`
	ICMPTimeout         *string `json:"icmpTimeout,omitempty"`
}

// ProtoPort is a protocol and port (and optionally a network) that
// failsafe rules always allow.
type ProtoPort struct {
	Protocol string `json:"protocol,omitempty"`
	Port     uint16 `json:"port"`
	Net      string `json:"net,omitempty"`
}

// RouteTableRange is a range of kernel routing table indexes.
type RouteTableRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// IptablesBackend is which iptables flavour Felix drives.
type IptablesBackend string

// Iptables backends.
const (
	IptablesBackendAuto     IptablesBackend = "Auto"
	IptablesBackendNFTables IptablesBackend = "NFT"
	IptablesBackendLegacy   IptablesBackend = "Legacy"
)

// FelixConfigurationList is a list of Felix configurations.
type FelixConfigurationList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []FelixConfiguration `json:"items"`
}

// Resources implements List.
func (l *FelixConfigurationList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *FelixConfigurationList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[FelixConfiguration](KindFelixConfigurationList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindFelixConfiguration, ListKind: KindFelixConfigurationList, Plural: "felixconfigurations", Stored: true,
		Aliases: []string{"felixconfiguration", "felixconfigurations", "felixconfig", "felixconfigs"},
		New: func() Resource {
			return &FelixConfiguration{TypeMeta: TypeMeta{Kind: KindFelixConfiguration, APIVersion: APIVersion}}
		},
		NewList: func() List {
			return &FelixConfigurationList{TypeMeta: TypeMeta{Kind: KindFelixConfigurationList, APIVersion: APIVersion}}
		},
	})
}
