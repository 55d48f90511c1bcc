package v3

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
)

func (v *validator) felixConfig(c *FelixConfiguration) {
	s := &c.Spec
	v.felixConfigName(c.Name, s.NodeSelector)
	for _, pf := range []struct{ field, value, pattern string }{
		{"spec.chainInsertMode", s.ChainInsertMode, "Insert|Append"},
		{"spec.defaultEndpointToHostAction", s.DefaultEndpointToHostAction, "Drop|Accept|Return"},
		{"spec.iptablesFilterAllowAction", s.IptablesFilterAllowAction, "Accept|Return"},
		{"spec.iptablesMangleAllowAction", s.IptablesMangleAllowAction, "Accept|Return"},
		{"spec.iptablesFilterDenyAction", s.IptablesFilterDenyAction, "Drop|Reject"},
		{"spec.nftablesFilterAllowAction", s.NftablesFilterAllowAction, "Accept|Return"},
		{"spec.nftablesMangleAllowAction", s.NftablesMangleAllowAction, "Accept|Return"},
		{"spec.nftablesFilterDenyAction", s.NftablesFilterDenyAction, "Drop|Reject"},
		{"spec.logSeverityScreen", s.LogSeverityScreen, felixLogLevels},
		{"spec.logSeverityFile", s.LogSeverityFile, felixLogLevels + "|None"},
		{"spec.logSeveritySys", s.LogSeveritySys, felixLogLevels + "|None"},
		{"spec.bpfLogLevel", s.BPFLogLevel, "Off|Info|Debug"},
		{"spec.bpfExternalServiceMode", s.BPFExternalServiceMode, "Tunnel|DSR"},
		{"spec.routeSource", s.RouteSource, "WorkloadIPs|CalicoIPAM"},
		{"spec.serviceLoopPrevention", s.ServiceLoopPrevention, "Drop|Reject|Disabled"},
		{"spec.workloadSourceSpoofing", s.WorkloadSourceSpoofing, "Disabled|Any"},
		{"spec.bpfMapSizeConntrackScaling", s.BPFMapSizeConntrackScaling, "Disabled|DoubleIfFull"},
		{"spec.bpfEnforceRPF", s.BPFEnforceRPF, "Disabled|Strict|Loose"},
	} {
		v.pattern(pf.field, pf.value, pf.pattern)
	}
	if s.IptablesBackend != nil {
		v.pattern("spec.iptablesBackend", string(*s.IptablesBackend), "Auto|Legacy|NFT")
	}
	for _, e := range []struct {
		field   string
		value   string
		allowed []string
	}{
		{"spec.nftablesMode", s.NFTablesMode, []string{"Disabled", "Enabled", "Auto"}},
		{"spec.nftablesFlowTableOffload", deref(s.NFTablesFlowTableOffload), []string{"Enabled", "Disabled"}},
		{"spec.awsSrcDstCheck", s.AWSSrcDstCheck, []string{"DoNothing", "Enable", "Disable"}},
		{"spec.floatingIPs", s.FloatingIPs, []string{"Enabled", "Disabled"}},
		{"spec.programClusterRoutes", s.ProgramClusterRoutes, []string{"Enabled", "Disabled"}},
		{"spec.bpfAttachType", s.BPFAttachType, []string{"TC", "TCX"}},
		{"spec.ipForwarding", s.IPForwarding, []string{"Enabled", "Disabled"}},
		{"spec.natOutgoingExclusions", deref(s.NATOutgoingExclusions), []string{"IPPoolsOnly", "IPPoolsAndHostIPs"}},
		{"spec.bpfConntrackLogLevel", s.BPFConntrackLogLevel, []string{"Off", "Debug"}},
		{"spec.bpfConntrackMode", deref(s.BPFConntrackCleanupMode), []string{"Auto", "Userspace", "BPFProgram"}},
		{"spec.bpfConnectTimeLoadBalancing", deref(s.BPFConnectTimeLoadBalancing), []string{"TCP", "Enabled", "Disabled"}},
		{"spec.bpfHostNetworkedNATWithoutCTLB", deref(s.BPFHostNetworkedNATWithoutCTLB), []string{"Enabled", "Disabled"}},
		{"spec.bpfRedirectToPeer", s.BPFRedirectToPeer, []string{"Enabled", "Disabled", "L2Only"}},
		{"spec.bpfProfiling", s.BPFProfiling, []string{"Enabled", "Disabled"}},
		{"spec.flowLogsLocalReporter", deref(s.FlowLogsLocalReporter), []string{"Disabled", "Enabled"}},
		{"spec.flowLogsPolicyEvaluationMode", deref(s.FlowLogsPolicyEvaluationMode), []string{"None", "Continuous"}},
		{"spec.windowsManageFirewallRules", deref(s.WindowsManageFirewallRules), []string{"Enabled", "Disabled"}},
	} {
		v.enum(e.field, e.value, e.allowed...)
	}
	for _, r := range []struct {
		field  string
		n      *int
		lo, hi int64
	}{
		{"spec.goGCThreshold", s.GoGCThreshold, -1, math.MaxInt32},
		{"spec.goMemoryLimitMB", s.GoMemoryLimitMB, -1, math.MaxInt32},
		{"spec.goMaxProcs", s.GoMaxProcs, -1, math.MaxInt32},
		{"spec.debugPort", s.DebugPort, 0, 65535},
		{"spec.bpfKubeProxyHealthzPort", s.BPFKubeProxyHealthzPort, 0, 65535},
		{"spec.bpfExtToServiceConnmark", s.BPFExtToServiceConnmark, 0, 4294967295},
		{"spec.ipv4NormalRoutePriority", s.IPv4NormalRoutePriority, 1, 2147483646},
		{"spec.ipv4ElevatedRoutePriority", s.IPv4ElevatedRoutePriority, 1, 2147483646},
		{"spec.ipv6NormalRoutePriority", s.IPv6NormalRoutePriority, 1, 2147483646},
		{"spec.ipv6ElevatedRoutePriority", s.IPv6ElevatedRoutePriority, 1, 2147483646},
		{"spec.wireguardRoutingRulePriority", s.WireguardRoutingRulePriority, 1, 32765},
		{"spec.bpfMaglevMaxEndpointsPerService", s.BPFMaglevMaxEndpointsPerService, 1, 3000},
		{"spec.bpfMaglevMaxServices", s.BPFMaglevMaxServices, 1, 3000},
		{"spec.bpfMapSizeConntrackCleanupQueue", s.BPFMapSizeConntrackCleanupQueue, 1, math.MaxInt32},
	} {
		v.intRange(r.field, r.n, r.lo, r.hi)
	}
	for i, h := range s.HealthTimeoutOverrides {
		f := fmt.Sprintf("spec.healthTimeoutOverrides[%d]", i)
		if !htoNameRE().MatchString(h.Name) {
			v.fail(f+".name", h.Name, "name should match regex %s", htoNameRE().String())
		}
		if h.Timeout.Duration < 0 {
			v.fail(f+".timeout", h.Timeout.Duration.String(), "Timeout should not be negative")
		}
	}
	for _, kv := range []struct{ field, value string }{
		{"spec.featureDetectOverride", s.FeatureDetectOverride}, {"spec.featureGates", s.FeatureGates},
	} {
		if !validKeyValueList(kv.value) {
			v.tag(kv.field, kv.value, "keyValueList")
		}
	}
	for _, re := range []struct{ field, value string }{
		{"spec.logDebugFilenameRegex", s.LogDebugFilenameRegex}, {"spec.bpfDataIfacePattern", s.BPFDataIfacePattern},
		{"spec.bpfL3IfacePattern", s.BPFL3IfacePattern}, {"spec.bpfDisableGROForIfaces", s.BPFDisableGROForIfaces},
		{"spec.mtuIfacePattern", s.MTUIfacePattern},
	} {
		if _, err := regexp.Compile(re.value); err != nil {
			v.tag(re.field, re.value, "regexp")
		}
	}
	if f := s.IptablesNATOutgoingInterfaceFilter; f != "" && !ifaceFilterRE().MatchString(f) {
		v.tag("spec.iptablesNATOutgoingInterfaceFilter", f, "ifaceFilter")
	}
	if l := s.BPFForceTrackPacketsFromIfaces; l != nil {
		for i, f := range *l {
			if !ifaceFilterRE().MatchString(f) {
				v.tag(fmt.Sprintf("spec.bpfForceTrackPacketsFromIfaces[%d]", i), f, "ifaceFilterSlice")
			}
		}
	}
	if h := s.PrometheusMetricsHost; h != "" && !prometheusHostRE().MatchString(h) {
		v.tag("spec.prometheusMetricsHost", h, "prometheusHost")
	}
	if m := s.BPFLogFilters; m != nil {
		for k := range *m {
			if !interfaceRE().MatchString(k) {
				v.tag("spec.bpfLogFilters", k, "bpfLogFilters")
			}
		}
	}
	for _, l := range []struct {
		field string
		cidrs *[]string
	}{{"spec.bpfDSROptoutCIDRs", s.BPFDSROptoutCIDRs}, {"spec.bpfExcludeCIDRsFromNAT", s.BPFExcludeCIDRsFromNAT}} {
		if l.cidrs == nil {
			continue
		}
		for i, c := range *l.cidrs {
			if _, ok := parseCIDROrIP(c); !ok {
				v.tag(fmt.Sprintf("%s[%d]", l.field, i), c, "cidrs")
			}
		}
	}
	if len(s.OpenstackRegion) > 63-len("openstack-region-") {
		v.fail("spec.openstackRegion", s.OpenstackRegion, "is too long")
	} else if s.OpenstackRegion != "" && !dns1123LabelRE().MatchString(s.OpenstackRegion) {
		v.fail("spec.openstackRegion", s.OpenstackRegion, "must be a valid DNS label")
	}
	if s.RouteTableRange != nil && s.RouteTableRanges != nil {
		v.fail("spec.routeTableRange", nil, "cannot be set when `RouteTableRanges` is also set")
	}
	if s.RouteTableRanges != nil {
		for i, r := range *s.RouteTableRanges {
			f := fmt.Sprintf("spec.routeTableRanges[%d]", i)
			switch {
			case r.Min > r.Max:
				v.fail(f, fmt.Sprintf("%d-%d", r.Min, r.Max), "min value cannot be greater than max value")
			case r.Min < 1:
				v.fail(f, fmt.Sprintf("%d-%d", r.Min, r.Max), "cannot target indices < 1")
			case int64(r.Max) > 0xffffffff:
				v.fail(f, fmt.Sprintf("%d-%d", r.Min, r.Max), "max index too high")
			}
		}
	}
	if s.InterfacePrefix != "" {
		for _, p := range strings.Split(s.InterfacePrefix, ",") {
			if p == "" || len(p) > 14 || strings.ContainsAny(p, "/: \t") {
				v.fail("spec.interfacePrefix", s.InterfacePrefix, "invalid interface prefix %q", p)
			}
		}
	}
	if s.InterfaceExclude != "" {
		for _, e := range strings.Split(s.InterfaceExclude, ",") {
			if re, isRE := strings.CutPrefix(e, "/"); isRE && strings.HasSuffix(re, "/") {
				if _, err := regexp.Compile(strings.TrimSuffix(re, "/")); err != nil {
					v.fail("spec.interfaceExclude", e, "invalid regular expression: %v", err)
				}
				continue
			}
			if msg := interfaceNameProblem(e); msg != "" {
				v.fail("spec.interfaceExclude", e, "invalid interface name: %s", msg)
			}
		}
	}
	for _, pp := range []struct {
		field string
		ports *[]ProtoPort
	}{{"spec.failsafeInboundHostPorts", s.FailsafeInboundHostPorts}, {"spec.failsafeOutboundHostPorts", s.FailsafeOutboundHostPorts}} {
		if pp.ports == nil {
			continue
		}
		for i, p := range *pp.ports {
			f := fmt.Sprintf("%s[%d]", pp.field, i)
			// Calico does not look into these lists, so it takes "tcp" as
			// felix reads it; Palisade takes any case of the three
			// protocols felix can open and refuses the rest, which no
			// failsafe rule could be built for (docs/not-acted-on.md).
			switch strings.ToUpper(p.Protocol) {
			case "TCP", "UDP", "SCTP":
			default:
				v.fail(f+".protocol", p.Protocol, "protocol must be 'TCP' or 'UDP' or 'SCTP' (any case)")
			}
			if p.Net != "" {
				v.nets(f+".net", []string{p.Net}, 0)
			}
		}
	}
	for _, d := range []struct {
		field string
		d     *Duration
	}{
		{"spec.routeRefreshInterval", s.RouteRefreshInterval},
		{"spec.interfaceRefreshInterval", s.InterfaceRefreshInterval},
		{"spec.iptablesRefreshInterval", s.IptablesRefreshInterval},
		{"spec.iptablesPostWriteCheckInterval", s.IptablesPostWriteCheckInterval},
		{"spec.iptablesLockTimeout", s.IptablesLockTimeout},
		{"spec.iptablesLockProbeInterval", s.IptablesLockProbeInterval},
		{"spec.ipsetsRefreshInterval", s.IpsetsRefreshInterval},
		{"spec.reportingInterval", s.ReportingInterval},
		{"spec.reportingTTL", s.ReportingTTL},
		{"spec.endpointReportingDelay", s.EndpointReportingDelay},
		{"spec.netlinkTimeout", s.NetlinkTimeout},
	} {
		v.duration(d.field, d.d)
	}
	for _, p := range []struct {
		field  string
		n      *int
		lo, hi int
	}{
		{"spec.healthPort", s.HealthPort, 0, 65535},
		{"spec.prometheusMetricsPort", s.PrometheusMetricsPort, 0, 65535},
		{"spec.metadataPort", s.MetadataPort, 0, 65535},
		{"spec.vxlanPort", s.VXLANPort, 1, 65535},
		{"spec.vxlanVNI", s.VXLANVNI, 1, 16777215},
		{"spec.wireguardListeningPort", s.WireguardListeningPort, 1, 65535},
		{"spec.wireguardListeningPortV6", s.WireguardListeningPortV6, 1, 65535},
		{"spec.ipipMTU", s.IPIPMTU, 0, 65535},
		{"spec.vxlanMTU", s.VXLANMTU, 0, 65535},
		{"spec.vxlanMTUV6", s.VXLANMTUV6, 0, 65535},
		{"spec.wireguardMTU", s.WireguardMTU, 0, 65535},
		{"spec.deviceRouteProtocol", s.DeviceRouteProtocol, 0, 255},
	} {
		if p.n != nil && (*p.n < p.lo || *p.n > p.hi) {
			v.fail(p.field, *p.n, "want %d-%d", p.lo, p.hi)
		}
	}
	if s.IptablesMarkMask != nil && *s.IptablesMarkMask == 0 {
		v.fail("spec.iptablesMarkMask", 0, "the mark mask needs at least one bit")
	}
	for _, a := range []struct {
		field, value string
		version      int
	}{
		{"spec.natOutgoingAddress", s.NATOutgoingAddress, 4},
		{"spec.deviceRouteSourceAddress", s.DeviceRouteSourceAddress, 4},
		{"spec.deviceRouteSourceAddressIPv6", s.DeviceRouteSourceAddressIPv6, 6},
	} {
		if addr, err := netip.ParseAddr(a.value); a.value != "" && (err != nil || ipVersionOf(addr) != a.version) {
			v.fail(a.field, a.value, "is not a valid IPv%d address", a.version)
		}
	}
	if s.NATPortRange != nil {
		if err := s.NATPortRange.Validate(); err != nil || s.NATPortRange.PortName != "" {
			v.fail("spec.natPortRange", s.NATPortRange.String(), "want a port range like 32768:65535")
		}
	}
	if s.KubeNodePortRanges != nil {
		for i, p := range *s.KubeNodePortRanges {
			switch {
			case p.PortName != "":
				v.fail(fmt.Sprintf("spec.kubeNodePortRanges[%d]", i), p.String(), "node port ranges should not contain named ports")
			case p.Validate() != nil:
				v.fail(fmt.Sprintf("spec.kubeNodePortRanges[%d]", i), p.String(), "want a port range like 30000:32767")
			}
		}
	}
	if r := s.RouteTableRange; r != nil && (r.Min < 1 || r.Max > 250 || r.Min > r.Max) {
		v.fail("spec.routeTableRange", fmt.Sprintf("%d-%d", r.Min, r.Max), "must be a range of route table indices within 1..250")
	}
	if s.PolicySyncPathPrefix != "" && !strings.HasPrefix(s.PolicySyncPathPrefix, "/") {
		v.fail("spec.policySyncPathPrefix", s.PolicySyncPathPrefix, "want an absolute path")
	}
	if s.WireguardInterfaceName != "" {
		v.interfaceName("spec.wireguardInterfaceName", s.WireguardInterfaceName)
	}
	if s.WireguardInterfaceNameV6 != "" {
		v.interfaceName("spec.wireguardInterfaceNameV6", s.WireguardInterfaceNameV6)
	}
	if s.ExternalNodesCIDRList != nil {
		for i, c := range *s.ExternalNodesCIDRList {
			p, ok := parseCIDROrIP(c)
			f := fmt.Sprintf("spec.externalNodesList[%d]", i)
			switch {
			case !ok:
				v.fail(f, c, "has invalid CIDR(s)")
			case !p.Addr().Is4():
				v.fail(f, c, "has invalid IPv6 CIDR")
			}
		}
	}
}

func (v *validator) kubeControllersConfig(c *KubeControllersConfiguration) {
	v.singleton(c.Name)
	s := &c.Spec
	// Calico's schema lists None (no logging) beside the levels, and not
	// Trace.
	v.enum("spec.logSeverityScreen", s.LogSeverityScreen, "None", "Debug", "Info", "Warning", "Error", "Fatal", "Panic")
	v.oneOf("spec.healthChecks", s.HealthChecks, "Enabled", "Disabled")
	v.duration("spec.etcdV3CompactionPeriod", s.EtcdV3CompactionPeriod)
	if p := s.PrometheusMetricsPort; p != nil && (*p < 0 || *p > 65535) {
		v.fail("spec.prometheusMetricsPort", *p, "want 0-65535")
	}
	if n := s.Controllers.Node; n != nil {
		v.duration("spec.controllers.node.reconcilerPeriod", n.ReconcilerPeriod)
		v.duration("spec.controllers.node.leakGracePeriod", n.LeakGracePeriod)
		v.oneOf("spec.controllers.node.syncLabels", n.SyncLabels, "Enabled", "Disabled")
		if h := n.HostEndpoint; h != nil {
			v.oneOf("spec.controllers.node.hostEndpoint.autoCreate", h.AutoCreate, "Enabled", "Disabled")
			v.oneOf("spec.controllers.node.hostEndpoint.createDefaultHostEndpoint", h.CreateDefaultHostEndpoint, "Enabled", "Disabled")
			for i, t := range h.Templates {
				f := fmt.Sprintf("spec.controllers.node.hostEndpoint.templates[%d]", i)
				v.nets(f+".interfaceCIDRs", t.InterfaceCIDRs, 0)
				v.selector(f+".nodeSelector", t.NodeSelector)
				if t.InterfacePattern != "" {
					if _, err := regexp.Compile(t.InterfacePattern); err != nil {
						v.fail(f+".interfacePattern", t.InterfacePattern, "invalid regular expression: %v", err)
					}
				}
			}
		}
	}
	if m := s.Controllers.Migration; m != nil {
		v.enum("spec.controllers.policyMigration.enabled", m.PolicyNameMigrator, "Disabled", "Enabled")
	}
	if lb := s.Controllers.LoadBalancer; lb != nil {
		v.oneOf("spec.controllers.loadBalancer.assignIPs", lb.AssignIPs, "AllServices", "RequestedServicesOnly")
	}
}

func (v *validator) apiConfig(s *CalicoAPIConfigSpec) {
	v.oneOf("spec.datastoreType", s.DatastoreType, DatastoreEtcdV3, DatastoreKubernetes)
	if s.EtcdEndpoints != "" {
		for _, e := range strings.Split(s.EtcdEndpoints, ",") {
			e = strings.TrimSpace(e)
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.fail("spec.etcdEndpoints", e, "want a URL like http://10.0.0.1:2379")
			}
		}
	}
	if (s.EtcdCertFile == "") != (s.EtcdKeyFile == "") {
		v.fail("spec", nil, "etcdCertFile and etcdKeyFile must be given together")
	}
	if (s.EtcdCert == "") != (s.EtcdKey == "") {
		v.fail("spec", nil, "etcdCert and etcdKey must be given together")
	}
}

// felixConfigName checks a FelixConfiguration's name against its
// nodeSelector: "default" applies to every node and "node.<name>" to one,
// so neither takes a selector; any other name is a selector-scoped
// configuration, which needs one (Calico's ConfigBatcher reads such a
// configuration only through its selector).
func (v *validator) felixConfigName(name, nodeSelector string) {
	scoped := name != "default" && !strings.HasPrefix(name, "node.")
	switch {
	case !scoped && nodeSelector != "":
		v.fail("spec.nodeSelector", nodeSelector, "only a configuration named other than \"default\" or \"node.<nodename>\" selects nodes")
	case scoped && nodeSelector == "":
		v.fail("metadata.name", name, "want \"default\", \"node.<nodename>\", or a spec.nodeSelector choosing the nodes this configuration applies to")
	case scoped:
		if msg := dnsSubdomainProblem(name); msg != "" {
			v.fail("metadata.name", name, "invalid name: %s", msg)
		}
	default:
		v.defaultOrNode(name)
	}
	v.selector("spec.nodeSelector", nodeSelector)
}
