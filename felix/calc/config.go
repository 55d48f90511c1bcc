package calc

import (
	"net/netip"
	"reflect"
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
	// IptablesFilterAllowAction / MangleAllowAction: "Accept" or "Return".
	IptablesFilterAllowAction string
	IptablesMangleAllowAction string
	// IptablesFilterDenyAction: "Drop" or "Reject".
	IptablesFilterDenyAction string
	// IptablesBackend is "Auto", "NFT" or "Legacy".
	IptablesBackend string
	IPv6Support     bool
	// IptablesMarkMask is the mark bits felix may use (0xffff0000).
	IptablesMarkMask uint32
	FailsafeInbound  []ProtoPort
	FailsafeOutbound []ProtoPort
	// Refresh intervals (0 disables the periodic refresh).
	IptablesRefreshInterval time.Duration
	IpsetsRefreshInterval   time.Duration
	RouteRefreshInterval    time.Duration
	LogSeverityScreen       string
	// WorkloadSourceSpoofing is "Disabled" or "Any": whether workloads'
	// allowSpoofedSourcePrefixes are honoured.
	WorkloadSourceSpoofing string
	// Spec is the merged FelixConfiguration spec before defaults.
	Spec v3.FelixConfigurationSpec
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
// `node.<name>` FelixConfiguration specs (either may be nil).
func MergeConfig(global, node *v3.FelixConfigurationSpec) *Config {
	var spec v3.FelixConfigurationSpec
	if global != nil {
		spec = *global
	}
	if node != nil {
		dst := reflect.ValueOf(&spec).Elem()
		src := reflect.ValueOf(node).Elem()
		for i := 0; i < src.NumField(); i++ {
			if !src.Field(i).IsZero() {
				dst.Field(i).Set(src.Field(i))
			}
		}
	}
	c := &Config{
		InterfacePrefixes:           splitList(orDefault(spec.InterfacePrefix, "cali")),
		InterfaceExclude:            splitList(orDefault(spec.InterfaceExclude, "kube-ipvs0")),
		ChainInsertMode:             orDefault(spec.ChainInsertMode, "Insert"),
		DefaultEndpointToHostAction: orDefault(spec.DefaultEndpointToHostAction, "Drop"),
		IptablesFilterAllowAction:   orDefault(spec.IptablesFilterAllowAction, "Accept"),
		IptablesMangleAllowAction:   orDefault(spec.IptablesMangleAllowAction, "Accept"),
		IptablesFilterDenyAction:    orDefault(spec.IptablesFilterDenyAction, "Drop"),
		IptablesBackend:             "Auto",
		IPv6Support:                 true,
		IptablesMarkMask:            0xffff0000,
		FailsafeInbound:             DefaultFailsafeInbound(),
		FailsafeOutbound:            DefaultFailsafeOutbound(),
		IptablesRefreshInterval:     90 * time.Second,
		IpsetsRefreshInterval:       90 * time.Second,
		RouteRefreshInterval:        90 * time.Second,
		LogSeverityScreen:           orDefault(spec.LogSeverityScreen, "Info"),
		WorkloadSourceSpoofing:      orDefault(spec.WorkloadSourceSpoofing, "Disabled"),
		Spec:                        spec,
	}
	if spec.IptablesBackend != nil && *spec.IptablesBackend != "" {
		c.IptablesBackend = string(*spec.IptablesBackend)
	}
	if spec.IPv6Support != nil {
		c.IPv6Support = *spec.IPv6Support
	}
	if spec.IptablesMarkMask != nil && *spec.IptablesMarkMask != 0 {
		c.IptablesMarkMask = *spec.IptablesMarkMask
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
	return c
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
