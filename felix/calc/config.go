package calc

import (
	"fmt"
	"math/bits"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// ProtoPort is a failsafe host port.
type ProtoPort struct {
	Protocol string // "tcp", "udp" or "sctp"
	Port     uint16
	// Net, when valid, limits the port to that remote range: the source
	// of inbound traffic, the destination of outbound.
	Net netip.Prefix
}

// Config is the FelixConfiguration that applies to this node: the fields of
// `node.<name>` override those of `default`, and Calico's defaults fill the
// rest. Only what the dataplane uses is here; Spec keeps the whole merge.
type Config struct {
	// InterfacePrefixes are the workload interface prefixes ("cali").
	InterfacePrefixes []string
	// InterfaceExclude are interface names (or /regexp/) felix leaves alone.
	InterfaceExclude []string
	// ChainInsertMode is "Insert" (our jumps go first in the kernel
	// chains) or "Append".
	ChainInsertMode string
	// DefaultEndpointToHostAction is "Drop", "Return" or "Accept": what
	// happens to workload traffic to the host itself after policy.
	DefaultEndpointToHostAction string
	// IptablesFilterAllowAction / MangleAllowAction: "Accept" or "Return",
	// what felix's filter (mangle) rules do with a packet they allow:
	// accept it, or return it to the kernel chain for the rules after
	// felix's jump.
	IptablesFilterAllowAction string
	IptablesMangleAllowAction string
	// IptablesFilterDenyAction: "Drop" or "Reject", what felix's filter
	// rules do with a packet they deny.
	IptablesFilterDenyAction string
	// IptablesBackend is "Auto", "NFT" or "Legacy".
	IptablesBackend string
	IPv6Support     bool
	// IptablesMarkMask is the mark bits felix may use (DefaultMarkMask);
	// felix uses its four lowest set bits.
	IptablesMarkMask uint32
	FailsafeInbound  []ProtoPort
	FailsafeOutbound []ProtoPort
	// Refresh intervals (0 disables the periodic refresh).
	IptablesRefreshInterval time.Duration
	IpsetsRefreshInterval   time.Duration
	RouteRefreshInterval    time.Duration
	// InterfaceRefreshInterval is how often the node's interfaces are
	// scanned again for the host endpoints named by expectedIPs (0: only
	// when something else changes).
	InterfaceRefreshInterval time.Duration
	LogSeverityScreen        string
	// WorkloadSourceSpoofing is "Disabled" or "Any": whether workloads'
	// allowSpoofedSourcePrefixes are honoured.
	WorkloadSourceSpoofing string
	// FloatingIPs is "Enabled" or "Disabled" (Calico's default): whether
	// workloads' ipNATs are programmed.
	FloatingIPs string
	// VXLAN4 and VXLAN6 say whether VXLAN is in use for the family, as
	// Calico's encapsulation calculator decides: vxlanEnabled when set,
	// else whether any IP pool of the family has a vxlanMode other than
	// Never. The graph sets them (they depend on the pools).
	VXLAN4, VXLAN6 bool
	// VXLANPort is vxlanPort (4789).
	VXLANPort int
	// AllowVXLANFromWorkloads is allowVXLANPacketsFromWorkloads: without
	// it, VXLAN packets (UDP to VXLANPort) a workload sends are dropped.
	AllowVXLANFromWorkloads bool
	// NAT is what natOutgoing masquerades and how.
	NAT NATOutgoing
	// Features is featureDetectOverride: the kernel features it forces
	// on (true) or off (false), by Calico's name; a feature not named is
	// detected. Palisade acts on MASQFullyRandom and SNATFullyRandom
	// (NAT) and TCX (the eBPF dataplane's attachments).
	Features map[string]bool
	// ExternalNodes is externalNodesList: CIDRs of hosts outside the
	// cluster treated as nodes (their VXLAN is accepted, and with
	// natOutgoingExclusions IPPoolsAndHostIPs they are not masqueraded to).
	ExternalNodes []netip.Prefix
	// Workload routes: DeviceRouteProtocol is deviceRouteProtocol (3,
	// RTPROT_BOOT), RemoveExternalRoutes removeExternalRoutes (true),
	// DeviceRouteSource4/6 deviceRouteSourceAddress(IPv6) (invalid when
	// unset).
	// ServiceLoopAction is serviceLoopPrevention: "Drop" (Calico's
	// default), "Reject" or "Disabled"; ServiceLoopRanges the advertised
	// service ranges it applies to (SetServiceRanges), sorted.
	ServiceLoopAction string
	ServiceLoopRanges []netip.Prefix
	// RouteSource is routeSource: "CalicoIPAM" (routes to other nodes'
	// pods from IPAM blocks) or "WorkloadIPs" (from their
	// WorkloadEndpoints' addresses: host-local IPAM).
	RouteSource string
	// MaxIPSetSize is maxIpsetSize (1048576): the maxelem of IP sets.
	MaxIPSetSize int
	// WireguardTables are the route tables Calico's felix takes for
	// WireGuard (IPv4, IPv6) from routeTableRanges (or the deprecated
	// routeTableRange; 1-250 by default), the two lowest indexes outside
	// 253-255, 0 when the ranges leave none; WireguardRulePriority is
	// wireguardRoutingRulePriority (99). Palisade has no WireGuard: it
	// keeps them as Calico's felix does with WireGuard off, empty and
	// with no rule of that priority leading to them.
	WireguardTables                        [2]int
	WireguardRulePriority                  int
	DeviceRouteProtocol                    int
	RemoveExternalRoutes                   bool
	DeviceRouteSource4, DeviceRouteSource6 netip.Addr
	// Spec is the merged FelixConfiguration spec before defaults.
	Spec v3.FelixConfigurationSpec
}

// NATOutgoing is the configuration of the masquerade of natOutgoing pools.
type NATOutgoing struct {
	// ExcludeHosts is natOutgoingExclusions IPPoolsAndHostIPs: traffic to
	// the nodes' addresses (and ExternalNodes) is not masqueraded either.
	ExcludeHosts bool
	// PortMin and PortMax are natPortRange (0, 0 when unset): TCP and UDP
	// are masqueraded to source ports in that range.
	PortMin, PortMax uint16
	// Address is natOutgoingAddress: SNAT to it instead of MASQUERADE.
	Address netip.Addr
	// Interface is iptablesNATOutgoingInterfaceFilter: masquerade only
	// traffic leaving by it (an iptables interface name, "+" a wildcard).
	Interface string
	// MasqRandom and SNATRandom add --random-fully to MASQUERADE and
	// SNAT: on unless featureDetectOverride says MASQFullyRandom=false
	// (SNATFullyRandom=false); the kernels Palisade runs on have it.
	MasqRandom, SNATRandom bool
}

// featureOverrides reads featureDetectOverride (Calico's
// "Feature=true,Other=false,Auto="): true or false forces a feature, an
// empty value leaves it to detection. Palisade acts on MASQFullyRandom,
// SNATFullyRandom, TCX and BPFLoop (Palisade's: the eBPF policy engine);
// other features are warned about.
func featureOverrides(s string) map[string]bool {
	out := map[string]bool{}
	for _, kv := range splitList(s) {
		k, v, _ := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k != "MASQFullyRandom" && k != "SNATFullyRandom" && k != "TCX" && k != "BPFLoop":
			log.WithField("featureDetectOverride", kv).Warn("featureDetectOverride names a feature Palisade does not detect: ignored")
		case v == "":
		case strings.EqualFold(v, "true") || strings.EqualFold(v, "false"):
			out[k] = strings.EqualFold(v, "true")
		default:
			log.WithField("featureDetectOverride", kv).Warn("featureDetectOverride value is not true, false or empty: ignored")
		}
	}
	return out
}

// defaultFailsafeInbound and defaultFailsafeOutbound are Calico's
// current failsafe ports: SSH, DHCP, DNS, BGP, etcd, Typha (5473), the
// Kubernetes API server (6443) and etcd's legacy ports (6666, 6667).
var (
	defaultFailsafeInbound = []ProtoPort{
		{"tcp", 22, netip.Prefix{}}, {"udp", 68, netip.Prefix{}}, {"tcp", 179, netip.Prefix{}},
		{"tcp", 2379, netip.Prefix{}}, {"tcp", 2380, netip.Prefix{}}, {"tcp", 5473, netip.Prefix{}},
		{"tcp", 6443, netip.Prefix{}}, {"tcp", 6666, netip.Prefix{}}, {"tcp", 6667, netip.Prefix{}},
	}
	defaultFailsafeOutbound = []ProtoPort{
		{"udp", 53, netip.Prefix{}}, {"udp", 67, netip.Prefix{}}, {"tcp", 179, netip.Prefix{}},
		{"tcp", 2379, netip.Prefix{}}, {"tcp", 2380, netip.Prefix{}}, {"tcp", 5473, netip.Prefix{}},
		{"tcp", 6443, netip.Prefix{}}, {"tcp", 6666, netip.Prefix{}}, {"tcp", 6667, netip.Prefix{}},
	}
)

// DefaultFailsafeInbound returns the default inbound failsafe ports.
func DefaultFailsafeInbound() []ProtoPort { return append([]ProtoPort(nil), defaultFailsafeInbound...) }

// DefaultFailsafeOutbound returns the default outbound failsafe ports.
func DefaultFailsafeOutbound() []ProtoPort {
	return append([]ProtoPort(nil), defaultFailsafeOutbound...)
}

// MergeConfig computes the Config of a node from the `default` and
// `node.<name>` FelixConfiguration specs (either may be nil) and, over
// them, any further layers (felix's local configuration: its environment
// over its configuration file). A field set in a later layer wins.
func MergeConfig(global, node *v3.FelixConfigurationSpec, over ...*v3.FelixConfigurationSpec) *Config {
	var spec v3.FelixConfigurationSpec
	if global != nil {
		spec = *global
	}
	for _, layer := range append([]*v3.FelixConfigurationSpec{node}, over...) {
		if layer == nil {
			continue
		}
		dst := reflect.ValueOf(&spec).Elem()
		src := reflect.ValueOf(layer).Elem()
		for i := 0; i < src.NumField(); i++ {
			if !src.Field(i).IsZero() {
				dst.Field(i).Set(src.Field(i))
			}
		}
	}
	c := &Config{
		InterfacePrefixes:           splitList(orDefault(spec.InterfacePrefix, "cali")),
		InterfaceExclude:            splitList(orDefault(spec.InterfaceExclude, "kube-ipvs0")),
		ChainInsertMode:             oneOf("chainInsertMode", spec.ChainInsertMode, "Insert", "Append"),
		DefaultEndpointToHostAction: oneOf("defaultEndpointToHostAction", spec.DefaultEndpointToHostAction, "Drop", "Return", "Accept"),
		IptablesFilterAllowAction:   oneOf("iptablesFilterAllowAction", spec.IptablesFilterAllowAction, "Accept", "Return"),
		IptablesMangleAllowAction:   oneOf("iptablesMangleAllowAction", spec.IptablesMangleAllowAction, "Accept", "Return"),
		IptablesFilterDenyAction:    oneOf("iptablesFilterDenyAction", spec.IptablesFilterDenyAction, "Drop", "Reject"),
		IptablesBackend:             "Auto",
		IPv6Support:                 true,
		IptablesMarkMask:            DefaultMarkMask,
		FailsafeInbound:             DefaultFailsafeInbound(),
		FailsafeOutbound:            DefaultFailsafeOutbound(),
		IptablesRefreshInterval:     90 * time.Second,
		IpsetsRefreshInterval:       90 * time.Second,
		RouteRefreshInterval:        90 * time.Second,
		InterfaceRefreshInterval:    90 * time.Second,
		LogSeverityScreen:           orDefault(spec.LogSeverityScreen, "Info"),
		WorkloadSourceSpoofing:      orDefault(spec.WorkloadSourceSpoofing, "Disabled"),
		FloatingIPs:                 oneOf("floatingIPs", spec.FloatingIPs, "Disabled", "Enabled"),
		VXLANPort:                   4789,
		ServiceLoopAction:           oneOf("serviceLoopPrevention", spec.ServiceLoopPrevention, "Drop", "Reject", "Disabled"),
		RouteSource:                 oneOf("routeSource", spec.RouteSource, "CalicoIPAM", "WorkloadIPs"),
		AllowVXLANFromWorkloads:     spec.AllowVXLANPacketsFromWorkloads != nil && *spec.AllowVXLANPacketsFromWorkloads,
		Features:                    featureOverrides(spec.FeatureDetectOverride),
		ExternalNodes:               externalNodes(spec.ExternalNodesCIDRList),
		Spec:                        spec,
	}
	c.NAT = natOutgoing(spec, c.Features)
	c.WireguardTables, c.WireguardRulePriority = wireguardTables(spec)
	c.DeviceRouteProtocol, c.RemoveExternalRoutes, c.MaxIPSetSize = 3, true, 1048576
	if n := spec.MaxIpsetSize; n != nil {
		if *n > 0 {
			c.MaxIPSetSize = *n
		} else {
			log.WithField("maxIpsetSize", *n).Warn("maxIpsetSize is not positive: using 1048576")
		}
	}
	if p := spec.DeviceRouteProtocol; p != nil {
		if *p > 0 && *p < 256 {
			c.DeviceRouteProtocol = *p
		} else {
			log.WithField("deviceRouteProtocol", *p).Warn("deviceRouteProtocol is not a route protocol (1-255): using 3")
		}
	}
	if spec.RemoveExternalRoutes != nil {
		c.RemoveExternalRoutes = *spec.RemoveExternalRoutes
	}
	c.DeviceRouteSource4 = routeSource("deviceRouteSourceAddress", spec.DeviceRouteSourceAddress, false)
	c.DeviceRouteSource6 = routeSource("deviceRouteSourceAddressIPv6", spec.DeviceRouteSourceAddressIPv6, true)
	if spec.VXLANPort != nil && *spec.VXLANPort > 0 && *spec.VXLANPort < 65536 {
		c.VXLANPort = *spec.VXLANPort
	}
	if spec.IptablesBackend != nil && *spec.IptablesBackend != "" {
		c.IptablesBackend = string(*spec.IptablesBackend)
	}
	if spec.IPv6Support != nil {
		c.IPv6Support = *spec.IPv6Support
	}
	if m := spec.IptablesMarkMask; m != nil && *m != 0 {
		if bits.OnesCount32(*m) >= 4 {
			c.IptablesMarkMask = *m
		} else {
			log.WithField("iptablesMarkMask", fmt.Sprintf("%#x", *m)).Warnf("iptablesMarkMask has fewer than the 4 bits felix needs: using %#x", DefaultMarkMask)
		}
	}
	if spec.FailsafeInboundHostPorts != nil {
		c.FailsafeInbound = protoPorts("failsafeInboundHostPorts", *spec.FailsafeInboundHostPorts)
	}
	if spec.FailsafeOutboundHostPorts != nil {
		c.FailsafeOutbound = protoPorts("failsafeOutboundHostPorts", *spec.FailsafeOutboundHostPorts)
	}
	if spec.IptablesRefreshInterval != nil {
		c.IptablesRefreshInterval = spec.IptablesRefreshInterval.Duration
	}
	if spec.IpsetsRefreshInterval != nil {
		c.IpsetsRefreshInterval = spec.IpsetsRefreshInterval.Duration
	}
	if spec.RouteRefreshInterval != nil {
		c.RouteRefreshInterval = spec.RouteRefreshInterval.Duration
	}
	if spec.InterfaceRefreshInterval != nil {
		c.InterfaceRefreshInterval = spec.InterfaceRefreshInterval.Duration
	}
	return c
}

// SetEncapsulation sets VXLAN4 and VXLAN6 from whether pools of each
// family ask for VXLAN, unless vxlanEnabled says otherwise (as Calico's
// encapsulation calculator: vxlanEnabled wins when set).
func (c *Config) SetEncapsulation(pools4, pools6 bool) {
	c.VXLAN4, c.VXLAN6 = pools4, pools6
	if e := c.Spec.VXLANEnabled; e != nil {
		c.VXLAN4, c.VXLAN6 = *e, *e && pools6
	}
}

// routeSource reads a source address hint of the family; one that does
// not parse or is of the other family is warned about and left out.
func routeSource(field, s string, ipv6 bool) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Unmap().Is6() != ipv6 {
		log.WithField(field, s).Warnf("%s is not an IPv%d address: routes to workloads get no source hint", field, map[bool]int{false: 4, true: 6}[ipv6])
		return netip.Addr{}
	}
	return a.Unmap()
}

// SetServiceRanges sets the ranges serviceLoopPrevention applies to:
// BGPConfiguration default's serviceClusterIPs, serviceExternalIPs and
// serviceLoadBalancerIPs (as Calico's felix).
func (c *Config) SetServiceRanges(r []netip.Prefix) { c.ServiceLoopRanges = r }

// serviceRanges reads the advertised service ranges of a BGPConfiguration
// (nil: none), sorted, without duplicates; one that does not parse is
// left out (the BGP part warns about it).
func serviceRanges(bc *v3.BGPConfiguration) []netip.Prefix {
	if bc == nil {
		return nil
	}
	var cidrs []string
	for _, b := range bc.Spec.ServiceClusterIPs {
		cidrs = append(cidrs, b.CIDR)
	}
	for _, b := range bc.Spec.ServiceExternalIPs {
		cidrs = append(cidrs, b.CIDR)
	}
	for _, b := range bc.Spec.ServiceLoadBalancerIPs {
		cidrs = append(cidrs, b.CIDR)
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := ParseNet(c); err == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// natOutgoing reads natOutgoingExclusions, natPortRange,
// natOutgoingAddress and iptablesNATOutgoingInterfaceFilter. A value
// that does not parse is warned about and left at its default.
func natOutgoing(spec v3.FelixConfigurationSpec, f map[string]bool) NATOutgoing {
	var n NATOutgoing
	if e := spec.NATOutgoingExclusions; e != nil {
		n.ExcludeHosts = oneOf("natOutgoingExclusions", *e, "IPPoolsOnly", "IPPoolsAndHostIPs") == "IPPoolsAndHostIPs"
	}
	if r := spec.NATPortRange; r != nil && r.PortName == "" && r.MaxPort > 0 {
		n.PortMin, n.PortMax = r.MinPort, r.MaxPort
	} else if r != nil {
		log.WithField("natPortRange", r.String()).Warn("natPortRange is not a port range: masquerading to any port")
	}
	if a := spec.NATOutgoingAddress; a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			log.WithError(err).WithField("natOutgoingAddress", a).Warn("natOutgoingAddress does not parse: masquerading instead")
		} else {
			n.Address = addr.Unmap()
		}
	}
	n.Interface = spec.IptablesNATOutgoingInterfaceFilter
	n.MasqRandom, n.SNATRandom = true, true
	if v, ok := f["MASQFullyRandom"]; ok {
		n.MasqRandom = v
	}
	if v, ok := f["SNATFullyRandom"]; ok {
		n.SNATRandom = v
	}
	return n
}

// externalNodes reads externalNodesList; an entry that does not parse is
// left out with a warning (it would only open more).
func externalNodes(list *[]string) []netip.Prefix {
	if list == nil {
		return nil
	}
	var out []netip.Prefix
	for _, s := range *list {
		p, err := ParseNet(strings.TrimSpace(s))
		if err != nil {
			log.WithError(err).WithField("externalNodesList", s).Warn("externalNodesList entry left out: it does not parse")
			continue
		}
		out = append(out, p)
	}
	return out
}

// FloatingIPsActive says whether workloads' ipNATs are programmed, and
// when not, why (for a warning): floatingIPs must be Enabled (both
// dataplanes translate them).
func (c *Config) FloatingIPsActive() (bool, string) {
	if c.FloatingIPs != "Enabled" {
		return false, "FelixConfiguration floatingIPs is Disabled"
	}
	return true, ""
}

// protoPorts reads failsafe ports. One whose net does not parse is left
// out (a failsafe port only ever opens, so fewer is the safe side).
func protoPorts(field string, in []v3.ProtoPort) []ProtoPort {
	out := make([]ProtoPort, 0, len(in))
	for _, p := range in {
		pp := ProtoPort{Protocol: strings.ToLower(orDefault(p.Protocol, "tcp")), Port: p.Port}
		if p.Net != "" {
			n, err := ParseNet(p.Net)
			if err != nil {
				log.WithError(err).WithFields(log.Fields{"field": field, "net": p.Net, "port": p.Port}).Warn("Failsafe port left out: its net does not parse")
				continue
			}
			pp.Net = n
		}
		out = append(out, pp)
	}
	return out
}

// DefaultMarkMask is Calico's default iptablesMarkMask.
const DefaultMarkMask = 0xffff0000

// oneOf is s spelled as the one of values it names (any case), values[0]
// when empty; an unknown value is warned about and gives values[0].
func oneOf(field, s string, values ...string) string {
	if s == "" {
		return values[0]
	}
	for _, v := range values {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	log.WithField(field, s).Warnf("Unknown %s: using %s", field, values[0])
	return values[0]
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// NotActedOn lists, sorted by JSON name, the fields set in the merged
// FelixConfiguration that felix accepts but does not act on (those not in
// v3.FelixConfigurationActedOn, the one list calicoctl and the docs
// share). A field holding the default Calico's client writes into every
// FelixConfiguration (nftablesMode Auto, say) says nothing the user
// asked for, and is not named.
func (c *Config) NotActedOn() []string {
	var out []string
	def := &v3.FelixConfiguration{}
	v3.Default(def)
	v, d := reflect.ValueOf(c.Spec), reflect.ValueOf(def.Spec)
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && !v3.FelixConfigurationActedOn[name] && !v.Field(i).IsZero() &&
			!reflect.DeepEqual(v.Field(i).Interface(), d.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// wireguardTables picks, as Calico's felix, the route table indexes of
// WireGuard from routeTableRanges (routeTableRange when that is unset,
// 1-250 when both are): the lowest two indexes of the ranges, leaving out
// 253-255 (the kernel's default, main and local tables). An index the
// ranges do not leave is 0, with a warning, as Calico's felix warns when
// it cannot assign WireGuard a table.
func wireguardTables(spec v3.FelixConfigurationSpec) ([2]int, int) {
	ranges := []v3.RouteTableIDRange{{Min: 1, Max: 250}}
	switch {
	case spec.RouteTableRanges != nil:
		ranges = *spec.RouteTableRanges
	case spec.RouteTableRange != nil:
		ranges = []v3.RouteTableIDRange{{Min: spec.RouteTableRange.Min, Max: spec.RouteTableRange.Max}}
	}
	var picked [2]int
	n := 0
	// The lowest indexes first, whatever order the ranges are in.
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b v3.RouteTableIDRange) int { return a.Min - b.Min })
	last := 0
	for _, r := range sorted {
		for i := max(r.Min, last+1); i <= r.Max && n < 2; i++ {
			if i >= 253 && i <= 255 || i <= 0 {
				continue
			}
			picked[n] = i
			n++
			last = i
		}
	}
	if n < 2 {
		log.WithField("routeTableRanges", ranges).Warn("routeTableRanges leave no route table for WireGuard's IPv4 and IPv6 routes; those tables are not kept empty")
	}
	prio := 99
	if p := spec.WireguardRoutingRulePriority; p != nil && *p > 0 && *p < 32766 {
		prio = *p
	}
	return picked, prio
}
