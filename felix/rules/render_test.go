package rules

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const node = "node-a"

// state accumulates the calc output, as the dataplane driver does.
type state struct {
	cfg       *calc.Config
	sets      map[string]*calc.IPSet
	policies  map[calc.PolicyID]*calc.Policy
	profiles  map[string]*calc.Profile
	endpoints map[calc.EndpointID]*calc.Endpoint
}

func (s *state) OnConfigUpdate(c *calc.Config)           { s.cfg = c }
func (s *state) OnIPSetUpdate(x *calc.IPSet)             { s.sets[x.ID] = x }
func (s *state) OnIPSetDelta(string, []string, []string) {}
func (s *state) OnIPSetRemoved(id string)                { delete(s.sets, id) }
func (s *state) OnPolicyUpdate(p *calc.Policy)           { s.policies[p.ID] = p }
func (s *state) OnPolicyRemoved(id calc.PolicyID)        { delete(s.policies, id) }
func (s *state) OnProfileUpdate(p *calc.Profile)         { s.profiles[p.Name] = p }
func (s *state) OnProfileRemoved(n string)               { delete(s.profiles, n) }
func (s *state) OnEndpointUpdate(e *calc.Endpoint)       { s.endpoints[e.ID] = e }
func (s *state) OnEndpointRemoved(id calc.EndpointID)    { delete(s.endpoints, id) }
func (s *state) OnRouteUpdate(calc.Route)                {}
func (s *state) OnRouteRemoved(netip.Prefix)             {}
func (s *state) OnInSync()                               {}

func calculate(rs []v3.Resource) *state {
	s := &state{sets: map[string]*calc.IPSet{}, policies: map[calc.PolicyID]*calc.Policy{},
		profiles: map[string]*calc.Profile{}, endpoints: map[calc.EndpointID]*calc.Endpoint{}}
	g := calc.NewGraph(node, s)
	for _, r := range rs {
		g.OnUpdate(calc.Update{Key: datastore.KeyOf(r), Value: r})
	}
	g.OnInSync()
	g.Flush()
	return s
}

func (s *state) render(family int) *Ruleset {
	return Render(Input{Config: s.cfg, IPVersion: family, Policies: s.policies, Profiles: s.profiles, Endpoints: s.endpoints})
}

// Fixtures.
var (
	tcp  = numorstring.ProtocolFromString("TCP")
	udp  = numorstring.ProtocolFromString("UDP")
	sctp = numorstring.ProtocolFromString("SCTP")
	icmp = numorstring.ProtocolFromString("ICMP")
)

func intp(i int) *int       { return &i }
func boolp(b bool) *bool    { return &b }
func strp(s string) *string { return &s }

func portRange(lo, hi uint16) *numorstring.Port {
	p, err := numorstring.PortFromRange(lo, hi)
	if err != nil {
		panic(err)
	}
	return &p
}

// serviceRanges is a BGPConfiguration default advertising service ranges
// of both families.
func serviceRanges() *v3.BGPConfiguration {
	return &v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.BGPConfigurationSpec{
			ServiceClusterIPs:      []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/112"}},
			ServiceExternalIPs:     []v3.ServiceExternalIPBlock{{CIDR: "203.0.113.0/24"}},
			ServiceLoadBalancerIPs: []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.51.100.7/32"}, {CIDR: "10.96.0.0/12"}},
		}}
}

// vxlanNodes are this node and two others with VXLAN tunnel addresses
// (node-b of both families, node-c of IPv4 only) and node-d without one.
func vxlanNodes() []v3.Resource {
	n := func(name, a4, a6, t4, t6 string) *v3.Node {
		return &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: name},
			Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: a4, IPv6Address: a6}, IPv4VXLANTunnelAddr: t4, IPv6VXLANTunnelAddr: t6}}
	}
	return []v3.Resource{
		n(node, "198.18.0.1/24", "fd00:18::1/64", "10.65.0.1", "fd00:65::1"),
		n("node-b", "198.18.0.2/24", "fd00:18::2/64", "10.65.1.1", "fd00:65:0:1::1"),
		n("node-c", "198.18.1.3/24", "", "10.65.2.1", ""),
		n("node-d", "198.18.1.4/24", "fd00:18::4/64", "", ""),
	}
}
func ord(f float64) *float64                         { return &f }
func ports(p ...numorstring.Port) []numorstring.Port { return p }

func pod(ns, name, ip string, labels map[string]string, node string) *v3.WorkloadEndpoint {
	return &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint},
		ObjectMeta: v3.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: v3.WorkloadEndpointSpec{Node: node, IPNetworks: []string{ip}, InterfaceName: "cali-" + name,
			Profiles: []string{"kns." + ns}, ServiceAccountName: "sa-" + name,
			Ports: []v3.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}}},
	}
}

// spoofer is a local pod that may send from 192.0.2.0/24 and
// 2001:db8:1::/48 besides its own addresses.
func spoofer(ips ...string) *v3.WorkloadEndpoint {
	w := pod("prod", "spoofer", ips[0], map[string]string{"app": "spoofer"}, node)
	w.Spec.IPNetworks = ips
	w.Spec.AllowSpoofedSourcePrefixes = []string{"192.0.2.0/24", "2001:db8:1::/48"}
	return w
}

func nsProfile(ns string, labels map[string]string) *v3.Profile {
	return &v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile}, ObjectMeta: v3.ObjectMeta{Name: "kns." + ns, Labels: labels},
		Spec: v3.ProfileSpec{Ingress: []v3.Rule{{Action: v3.Allow}}, Egress: []v3.Rule{{Action: v3.Allow}}}}
}

func gnp(name string, order *float64, spec v3.GlobalNetworkPolicySpec) *v3.GlobalNetworkPolicy {
	spec.Order = order
	if spec.Selector == "" {
		spec.Selector = "app == 'web'"
	}
	return &v3.GlobalNetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindGlobalNetworkPolicy}, ObjectMeta: v3.ObjectMeta{Name: name}, Spec: spec}
}

func netpol(ns, name string, spec v3.NetworkPolicySpec) *v3.NetworkPolicy {
	if spec.Selector == "" {
		spec.Selector = "app == 'web'"
	}
	return &v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy}, ObjectMeta: v3.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func hep(name, iface string, labels map[string]string) *v3.HostEndpoint {
	return &v3.HostEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindHostEndpoint}, ObjectMeta: v3.ObjectMeta{Name: name, Labels: labels},
		Spec: v3.HostEndpointSpec{Node: node, InterfaceName: iface, ExpectedIPs: []string{"198.18.0.1"}}}
}

func felixConfig(spec v3.FelixConfigurationSpec) *v3.FelixConfiguration {
	return &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: spec}
}

// base is a namespace with a local web pod and a remote db pod.
func base() []v3.Resource {
	return []v3.Resource{
		nsProfile("prod", map[string]string{"env": "prod"}),
		nsProfile("dev", map[string]string{"env": "dev"}),
		pod("prod", "web", "10.65.0.2/32", map[string]string{"app": "web"}, node),
		pod("prod", "db", "10.65.1.3/32", map[string]string{"app": "db"}, "node-b"),
		pod("dev", "client", "10.65.2.4/32", map[string]string{"app": "client"}, "node-b"),
	}
}

// floaters are local pods with floating IPs (two of them, and a dual-stack
// one), and a remote pod whose ipNATs are another node's.
func floaters() []v3.Resource {
	a := pod("prod", "fa", "10.65.0.5/32", map[string]string{"app": "fa"}, node)
	a.Spec.IPNATs = []v3.IPNAT{{InternalIP: "10.65.0.5", ExternalIP: "203.0.113.9"}, {InternalIP: "10.65.0.5", ExternalIP: "203.0.113.5"}}
	b := pod("prod", "fb", "10.65.0.6/32", map[string]string{"app": "fb"}, node)
	b.Spec.IPNetworks = append(b.Spec.IPNetworks, "fd00:65::6/128")
	b.Spec.IPNATs = []v3.IPNAT{{InternalIP: "fd00:65::6", ExternalIP: "2001:db8:f::6"}, {InternalIP: "10.65.0.6", ExternalIP: "203.0.113.6"}}
	r := pod("prod", "fr", "10.65.3.7/32", map[string]string{"app": "fr"}, "node-b")
	r.Spec.IPNATs = []v3.IPNAT{{InternalIP: "10.65.3.7", ExternalIP: "203.0.113.7"}}
	return []v3.Resource{a, b, r}
}

type catalogueCase struct {
	name      string
	resources []v3.Resource
	families  []int
}

func catalogue() []catalogueCase {
	in := func(rules ...v3.Rule) v3.GlobalNetworkPolicySpec {
		return v3.GlobalNetworkPolicySpec{Ingress: rules, Types: []v3.PolicyType{v3.PolicyTypeIngress}}
	}
	deny := v3.Deny
	pass := v3.Pass
	tier := func(name string, order float64, action v3.Action) *v3.Tier {
		return &v3.Tier{TypeMeta: v3.TypeMeta{Kind: v3.KindTier}, ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.TierSpec{Order: &order, DefaultAction: &action}}
	}
	inTier := func(p *v3.GlobalNetworkPolicy, t string) *v3.GlobalNetworkPolicy { p.Spec.Tier = t; return p }
	_ = deny
	cases := []catalogueCase{
		{"profiles-only", nil, []int{4}},
		{"allow-deny", []v3.Resource{gnp("allow-db", ord(10), in(
			v3.Rule{Action: v3.Allow, Protocol: &tcp, Source: v3.EntityRule{Selector: "app == 'db'"}, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(80))}},
			v3.Rule{Action: v3.Deny}))}, []int{4}},
		{"pass-log-tiers", []v3.Resource{
			tier("security", 10, pass), tier("platform", 20, deny),
			inTier(gnp("log-all", ord(1), in(v3.Rule{Action: v3.Log}, v3.Rule{Action: v3.Pass, Source: v3.EntityRule{Nets: []string{"10.65.0.0/16"}}})), "security"),
			inTier(gnp("unordered", nil, in(v3.Rule{Action: v3.Deny, Protocol: &udp})), "security"),
			inTier(gnp("platform-allow", ord(5), in(v3.Rule{Action: v3.Allow, Protocol: &tcp})), "platform"),
		}, []int{4}},
		{"named-ports-namespace-selector-service-accounts", []v3.Resource{
			netpol("prod", "np", v3.NetworkPolicySpec{Ingress: []v3.Rule{
				{Action: v3.Allow, Protocol: &tcp, Source: v3.EntityRule{NamespaceSelector: "env == 'dev'"}, Destination: v3.EntityRule{Ports: ports(numorstring.NamedPort("http"), numorstring.SinglePort(443))}},
				{Action: v3.Allow, Source: v3.EntityRule{ServiceAccounts: &v3.ServiceAccountMatch{Names: []string{"sa-db"}}}},
			}})}, []int{4}},
		{"nets-notnets-network-sets", []v3.Resource{
			&v3.GlobalNetworkSet{TypeMeta: v3.TypeMeta{Kind: v3.KindGlobalNetworkSet}, ObjectMeta: v3.ObjectMeta{Name: "partners", Labels: map[string]string{"role": "partner"}},
				Spec: v3.GlobalNetworkSetSpec{Nets: []string{"192.0.2.0/24", "2001:db8::/48"}}},
			gnp("nets", nil, in(
				v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Nets: []string{"10.0.0.0/8", "172.16.0.0/12", "fd00::/8"}, NotNets: []string{"10.1.0.0/16"}}},
				v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Selector: "role == 'partner'", NotSelector: "app == 'db'"}},
			))}, []int{4, 6}},
		{"icmp-protocols-ports", []v3.Resource{gnp("protos", nil, in(
			v3.Rule{Action: v3.Allow, Protocol: &icmp, ICMP: &v3.ICMPFields{Type: intp(8), Code: intp(0)}},
			v3.Rule{Action: v3.Deny, Protocol: &icmp, NotICMP: &v3.ICMPFields{Type: intp(3)}},
			v3.Rule{Action: v3.Allow, Protocol: &sctp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(9000))}},
			v3.Rule{Action: v3.Allow, Protocol: &udp, Destination: v3.EntityRule{Ports: ports(numorstring.Port{MinPort: 5000, MaxPort: 5100}), NotPorts: ports(numorstring.SinglePort(5050))}},
			v3.Rule{Action: v3.Allow, Protocol: func() *numorstring.Protocol { p := numorstring.ProtocolFromInt(47); return &p }()},
			v3.Rule{Action: v3.Deny, NotProtocol: &tcp, IPVersion: intp(4)},
		))}, []int{4, 6}},
		{"host-endpoint-failsafe", []v3.Resource{
			hep("eth0", "eth0", map[string]string{"host": "a"}),
			gnp("host-ssh", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", Ingress: []v3.Rule{{Action: v3.Allow, Protocol: &tcp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(22))}}}}),
			gnp("host-fwd", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", ApplyOnForward: true, Egress: []v3.Rule{{Action: v3.Allow}}}),
			gnp("host-prednat", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", PreDNAT: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Deny, Source: v3.EntityRule{Nets: []string{"203.0.113.0/24"}}}}}),
			gnp("host-untracked", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", DoNotTrack: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Allow, Protocol: &udp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(4789))}}}}),
		}, []int{4}},
		// "*" after the named endpoint, workload interfaces left out; no
		// applyOnForward policy: the forward chains are empty.
		{"host-endpoint-all-interfaces", []v3.Resource{
			hep("eth0", "eth0", map[string]string{"host": "a"}),
			hep("all", "*", map[string]string{"host": "a"}),
			gnp("host-ssh", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", Ingress: []v3.Rule{{Action: v3.Allow, Protocol: &tcp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(22))}}}}),
			gnp("host-untracked", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", DoNotTrack: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Allow, Protocol: &udp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(4789))}}}}),
			gnp("host-prednat", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", PreDNAT: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Deny, Source: v3.EntityRule{Nets: []string{"203.0.113.0/24"}}}}}),
		}, []int{4}},
		// Fields felix cannot enforce: the Allow and Log rules that have one
		// are left out (they match nothing), the Deny and Pass rules deny
		// what the rest of them matches; only the last Allow is written.
		{"unenforceable-fields", []v3.Resource{gnp("to-api", nil, v3.GlobalNetworkPolicySpec{Types: []v3.PolicyType{v3.PolicyTypeEgress}, Egress: []v3.Rule{
			{Action: v3.Allow, Protocol: &tcp, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "kubernetes", Namespace: "default"}}},
			{Action: v3.Allow, Source: v3.EntityRule{Services: &v3.ServiceMatch{Name: "web", Namespace: "prod"}}},
			{Action: v3.Allow, Protocol: &tcp, HTTP: &v3.HTTPMatch{Methods: []string{"GET"}, Paths: []v3.HTTPPath{{Prefix: "/api"}}}},
			{Action: v3.Log, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "kubernetes", Namespace: "default"}}},
			{Action: v3.Allow, Protocol: &icmp, ICMP: &v3.ICMPFields{Code: intp(0)}},
			{Action: v3.Deny, Protocol: &udp, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "dns", Namespace: "kube-system"}}},
			{Action: v3.Pass, Protocol: &tcp, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "kubernetes", Namespace: "default"}, Ports: ports(numorstring.SinglePort(443))}},
			{Action: v3.Allow, Protocol: &icmp, IPVersion: intp(6)},
			{Action: v3.Allow, Protocol: &tcp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(8443))}},
		}})}, []int{4, 6}},
		// Failsafe ports limited to a net: only that source (inbound) or
		// destination (outbound), only in the net's family.
		{"failsafe-nets", []v3.Resource{
			hep("eth0", "eth0", map[string]string{"host": "a"}),
			felixConfig(v3.FelixConfigurationSpec{
				FailsafeInboundHostPorts:  &[]v3.ProtoPort{{Protocol: "TCP", Port: 22, Net: "198.18.0.0/24"}, {Protocol: "TCP", Port: 22, Net: "fd00:18::/64"}, {Protocol: "UDP", Port: 68}},
				FailsafeOutboundHostPorts: &[]v3.ProtoPort{{Protocol: "TCP", Port: 2379, Net: "198.18.0.10"}, {Port: 6443}},
			}),
		}, []int{4, 6}},
		// Anti-spoofing: strict reverse path for every workload interface
		// in raw; allowSpoofedSourcePrefixes only with workloadSourceSpoofing
		// Any (without it the same pod adds nothing).
		{"anti-spoofing", []v3.Resource{
			felixConfig(v3.FelixConfigurationSpec{WorkloadSourceSpoofing: "Any"}),
			spoofer("10.65.0.9/32", "fd00:65::9/128"),
		}, []int{4, 6}},
		{"anti-spoofing-disabled", []v3.Resource{spoofer("10.65.0.9/32", "fd00:65::9/128")}, []int{4}},
		// Calico's iptables action settings and a mark mask of other
		// bits: filter ACCEPTs become RETURNs, filter DROPs REJECTs, mangle
		// ACCEPTs RETURNs (raw stays), and the marks move to 0x1000000….
		{"iptables-actions-mark-mask", []v3.Resource{
			felixConfig(v3.FelixConfigurationSpec{IptablesFilterAllowAction: "Return", IptablesMangleAllowAction: "Return",
				IptablesFilterDenyAction: "Reject", IptablesMarkMask: func() *uint32 { m := uint32(0xff000000); return &m }()}),
			hep("eth0", "eth0", map[string]string{"host": "a"}),
			gnp("allow-db", ord(10), in(
				v3.Rule{Action: v3.Allow, Protocol: &tcp, Source: v3.EntityRule{Selector: "app == 'db'", NotNets: []string{"10.65.9.0/24"}}},
				v3.Rule{Action: v3.Pass, Protocol: &udp},
				v3.Rule{Action: v3.Deny})),
			gnp("host-prednat", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", PreDNAT: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Deny, Source: v3.EntityRule{Nets: []string{"203.0.113.0/24"}}}}}),
			gnp("host-untracked", nil, v3.GlobalNetworkPolicySpec{Selector: "host == 'a'", DoNotTrack: true, ApplyOnForward: true, Ingress: []v3.Rule{{Action: v3.Allow, Protocol: &udp, Destination: v3.EntityRule{Ports: ports(numorstring.SinglePort(4789))}}}}),
		}, []int{4}},
		{"endpoint-to-host-return", []v3.Resource{felixConfig(v3.FelixConfigurationSpec{DefaultEndpointToHostAction: "Return"})}, []int{4}},
		{"endpoint-to-host-accept", []v3.Resource{felixConfig(v3.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept"})}, []int{4}},
		{"nat-outgoing", []v3.Resource{
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "pool"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", NATOutgoing: true}},
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "nonat"}, Spec: v3.IPPoolSpec{CIDR: "10.66.0.0/16"}},
		}, []int{4}},
		// VXLAN in use (a VXLAN pool of each family): cali-INPUT accepts
		// VXLAN to a local address only from nodes with a tunnel address
		// of the family and externalNodesList (all-vxlan-net) and drops
		// the rest; workloads' VXLAN is dropped where their traffic
		// enters. all-hosts-net holds every node's addresses.
		{"vxlan", append(vxlanNodes(),
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "vx4"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", VXLANMode: v3.EncapAlways}},
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "vx6"}, Spec: v3.IPPoolSpec{CIDR: "fd00:65::/48", VXLANMode: v3.EncapCrossSubnet}},
			felixConfig(v3.FelixConfigurationSpec{ExternalNodesCIDRList: &[]string{"198.19.200.0/24", "fd00:19::7"}}),
		), []int{4, 6}},
		// vxlanEnabled false wins over the pools; workloads may send VXLAN
		// (to the configured port) when allowed.
		{"vxlan-disabled-workloads-allowed", append(vxlanNodes(),
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "vx4"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", VXLANMode: v3.EncapAlways}},
			felixConfig(v3.FelixConfigurationSpec{VXLANEnabled: boolp(false), AllowVXLANPacketsFromWorkloads: boolp(true), VXLANPort: intp(4790)}),
		), []int{4}},
		// No VXLAN pool: no VXLAN rule in cali-INPUT, workloads' VXLAN to
		// the configured port still dropped.
		{"vxlan-port-no-pool", []v3.Resource{felixConfig(v3.FelixConfigurationSpec{VXLANPort: intp(4790)})}, []int{4}},
		// natOutgoingExclusions IPPoolsAndHostIPs keeps the nodes (and
		// externalNodesList) out of the masquerade; natPortRange gives TCP
		// and UDP ports from the range; natOutgoingAddress SNATs instead
		// (its family only); the interface filter limits it all.
		{"nat-outgoing-options", append(vxlanNodes(),
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "pool"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", NATOutgoing: true}},
			felixConfig(v3.FelixConfigurationSpec{NATOutgoingExclusions: strp("IPPoolsAndHostIPs"), NATPortRange: portRange(32768, 65000),
				NATOutgoingAddress: "198.18.0.1", IptablesNATOutgoingInterfaceFilter: "eth+", ExternalNodesCIDRList: &[]string{"198.19.200.0/24"}}),
		), []int{4, 6}},
		// featureDetectOverride MASQFullyRandom=false: no --random-fully.
		{"nat-outgoing-masq-not-random", []v3.Resource{
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "pool"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", NATOutgoing: true}},
			felixConfig(v3.FelixConfigurationSpec{FeatureDetectOverride: "MASQFullyRandom=false,SNATFullyRandom=,ChecksumOffloadBroken=true"}),
		}, []int{4}},
		{"nat-outgoing-exclusions", append(vxlanNodes(),
			&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: "pool"}, Spec: v3.IPPoolSpec{CIDR: "10.65.0.0/16", NATOutgoing: true}},
			felixConfig(v3.FelixConfigurationSpec{NATOutgoingExclusions: strp("IPPoolsAndHostIPs")}),
		), []int{4}},
		// serviceLoopPrevention (Drop by default): forwarded packets still
		// addressed to an advertised service range end in cali-cidr-block.
		{"service-loop-prevention", []v3.Resource{serviceRanges()}, []int{4, 6}},
		{"service-loop-prevention-reject", []v3.Resource{serviceRanges(), felixConfig(v3.FelixConfigurationSpec{ServiceLoopPrevention: "Reject"})}, []int{4}},
		{"service-loop-prevention-disabled", []v3.Resource{serviceRanges(), felixConfig(v3.FelixConfigurationSpec{ServiceLoopPrevention: "Disabled"})}, []int{4}},
		{"floating-ips", append(floaters(), felixConfig(v3.FelixConfigurationSpec{FloatingIPs: "Enabled"})), []int{4, 6}},
		{"floating-ips-disabled", floaters(), []int{4}},
	}
	for i := range cases {
		cases[i].resources = append(base(), cases[i].resources...)
	}
	return cases
}

// golden renders every table plus the IP sets the rules use.
func golden(s *state, family int) string {
	rs := s.render(family)
	var b strings.Builder
	fmt.Fprintf(&b, "# IPv%d IP sets\n", family)
	for _, id := range slices.Sorted(func(y func(string) bool) {
		for id := range s.sets {
			if !y(id) {
				return
			}
		}
	}) {
		set := s.sets[id]
		var members []string
		for _, m := range set.Members {
			if calc.MemberIsIPv6(m) == (family == 6) {
				members = append(members, m)
			}
		}
		fmt.Fprintf(&b, "# %s %s %s\n", IPSetName(id, family), set.Type, strings.Join(members, " "))
	}
	for _, t := range TableNames() {
		b.WriteString(rs.Restore(t, true))
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	for _, c := range catalogue() {
		s := calculate(c.resources)
		for _, fam := range c.families {
			name := fmt.Sprintf("%s-v%d.golden", c.name, fam)
			t.Run(name, func(t *testing.T) {
				got := golden(s, fam)
				path := filepath.Join("testdata", name)
				if *update {
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update)", err)
				}
				if got != string(want) {
					t.Errorf("%s differs from the rendering; diff with -update:\n%s", path, got)
				}
			})
		}
	}
}

// TestNamesAndHashes checks the limits iptables and ipset set on names and
// that rule hashes depend on position.
func TestNamesAndHashes(t *testing.T) {
	long := calc.PolicyID{Tier: "default", Namespace: "a-very-long-namespace-name", Name: "a-very-long-policy-name"}
	for _, c := range []string{PolicyChain(long, true), PolicyChain(long, false), ProfileChain(strings.Repeat("p", 40), true), ChainName(PrefixToWorkload, "cali0123456789a")} {
		if len(c) > MaxChainName {
			t.Errorf("chain %q is %d long, max %d", c, len(c), MaxChainName)
		}
	}
	if PolicyChain(long, true) == PolicyChain(calc.PolicyID{Tier: "default", Namespace: long.Namespace, Name: long.Name + "x"}, true) {
		t.Error("two long policy names share a chain")
	}
	for _, id := range []string{"s:abcdefghijklmnopqrstuv", "n:abcdefghijklmnopqrstuv", calc.IPSetMasqPools, calc.IPSetAllPools} {
		for _, fam := range []int{4, 6} {
			if n := IPSetName(id, fam); len(n) > 31 {
				t.Errorf("ipset %q is %d long", n, len(n))
			}
		}
	}
	rules := []Rule{{Action: "ACCEPT"}, {Action: "ACCEPT"}}
	hashRules("c", rules)
	if rules[0].Hash == rules[1].Hash || len(rules[0].Hash) != 16 {
		t.Errorf("hashes %q %q: want 16 chars, different by position", rules[0].Hash, rules[1].Hash)
	}
}

// TestIptablesRestoreAccepts feeds rendered rulesets to iptables-restore
// --test, nft and legacy, in a network namespace holding the IP sets.
func TestIptablesRestoreAccepts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ns := fmt.Sprintf("felixrules-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	inNS := func(stdin string, args ...string) error {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, c := range catalogue() {
		s := calculate(c.resources)
		for _, fam := range c.families {
			var sets strings.Builder
			for id, set := range s.sets {
				f := "inet"
				if fam == 6 {
					f = "inet6"
				}
				fmt.Fprintf(&sets, "create %s %s family %s -exist\n", IPSetName(id, fam), set.Type, f)
			}
			if err := inNS(sets.String(), "ipset", "restore"); err != nil {
				t.Fatal(err)
			}
			rs := s.render(fam)
			for _, backend := range []string{"nft", "legacy"} {
				cmd := fmt.Sprintf("iptables-%s-restore", backend)
				if fam == 6 {
					cmd = fmt.Sprintf("ip6tables-%s-restore", backend)
				}
				for _, table := range TableNames() {
					if err := inNS(rs.Restore(table, true), cmd, "--noflush", "--test"); err != nil {
						t.Errorf("%s v%d %s table %s: %v", c.name, fam, backend, table, err)
					}
				}
			}
		}
	}
}
