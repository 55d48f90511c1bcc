package v3

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

func (v *validator) felixConfig(c *FelixConfiguration) {
	v.defaultOrNode(c.Name)
	s := &c.Spec
	v.oneOf("spec.chainInsertMode", s.ChainInsertMode, "Insert", "Append")
	v.oneOf("spec.defaultEndpointToHostAction", s.DefaultEndpointToHostAction, "Drop", "Return", "Accept")
	v.oneOf("spec.iptablesFilterAllowAction", s.IptablesFilterAllowAction, "Accept", "Return")
	v.oneOf("spec.iptablesMangleAllowAction", s.IptablesMangleAllowAction, "Accept", "Return")
	v.oneOf("spec.iptablesFilterDenyAction", s.IptablesFilterDenyAction, "Drop", "Reject")
	if s.IptablesBackend != nil {
		v.oneOfFold("spec.iptablesBackend", string(*s.IptablesBackend), "Auto", "NFT", "Legacy")
	}
	v.oneOfFold("spec.logSeverityScreen", s.LogSeverityScreen, logSeverities...)
	v.oneOfFold("spec.logSeverityFile", s.LogSeverityFile, append(logSeverities, "None")...)
	v.oneOfFold("spec.logSeveritySys", s.LogSeveritySys, append(logSeverities, "None")...)
	v.oneOf("spec.bpfLogLevel", s.BPFLogLevel, "Off", "Info", "Debug")
	v.oneOf("spec.bpfExternalServiceMode", s.BPFExternalServiceMode, "Tunnel", "DSR")
	v.oneOf("spec.routeSource", s.RouteSource, "CalicoIPAM", "WorkloadIPs")
	v.oneOf("spec.serviceLoopPrevention", s.ServiceLoopPrevention, "Drop", "Reject", "Disabled")
	v.oneOf("spec.workloadSourceSpoofing", s.WorkloadSourceSpoofing, "Disabled", "Any")
	v.oneOf("spec.nftablesMode", s.NFTablesMode, "Enabled", "Disabled", "Auto")
	v.oneOf("spec.awsSrcDstCheck", s.AWSSrcDstCheck, "DoNothing", "Enable", "Disable")
	v.oneOf("spec.floatingIPs", s.FloatingIPs, "Enabled", "Disabled")
	v.oneOf("spec.programClusterRoutes", s.ProgramClusterRoutes, "Enabled", "Disabled")
	v.oneOf("spec.bpfAttachType", s.BPFAttachType, "TC", "TCX")
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
			if p.Protocol == "" {
				v.fail(f+".protocol", nil, "a protocol is required (TCP, UDP or SCTP)")
			}
			v.oneOfFold(f+".protocol", p.Protocol, "TCP", "UDP", "SCTP")
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
	if s.NATOutgoingAddress != "" {
		v.ip("spec.natOutgoingAddress", s.NATOutgoingAddress, 4)
	}
	if s.DeviceRouteSourceAddress != "" {
		v.ip("spec.deviceRouteSourceAddress", s.DeviceRouteSourceAddress, 4)
	}
	if s.DeviceRouteSourceAddressIPv6 != "" {
		v.ip("spec.deviceRouteSourceAddressIPv6", s.DeviceRouteSourceAddressIPv6, 6)
	}
	if s.NATPortRange != nil {
		if err := s.NATPortRange.Validate(); err != nil || s.NATPortRange.PortName != "" {
			v.fail("spec.natPortRange", s.NATPortRange.String(), "want a port range like 32768:65535")
		}
	}
	if s.KubeNodePortRanges != nil {
		for i, p := range *s.KubeNodePortRanges {
			if err := p.Validate(); err != nil || p.PortName != "" {
				v.fail(fmt.Sprintf("spec.kubeNodePortRanges[%d]", i), p.String(), "want a port range like 30000:32767")
			}
		}
	}
	if r := s.RouteTableRange; r != nil && (r.Min < 1 || r.Max > 250 || r.Min > r.Max) {
		v.fail("spec.routeTableRange", fmt.Sprintf("%d-%d", r.Min, r.Max), "want 1 <= min <= max <= 250")
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
		v.nets("spec.externalNodesList", *s.ExternalNodesCIDRList, 0)
	}
}

func (v *validator) kubeControllersConfig(c *KubeControllersConfiguration) {
	v.singleton(c.Name)
	s := &c.Spec
	v.oneOfFold("spec.logSeverityScreen", s.LogSeverityScreen, logSeverities...)
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
