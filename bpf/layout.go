package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
)

// The layouts shared with c/palisade.h, from the types bpf2go generates.
type (
	// State is the per-CPU state of the packet being decided.
	State = palisadeState
	// Endpoint is an interface's entry in MapEndpoints.
	Endpoint = palisadeEp
	// SrcKey is an anti-spoofing entry's key.
	SrcKey = palisadeSrcKey
	// SetKey is an IP set member's key (LPM: 64 bits of set id, then the
	// address).
	SetKey = palisadeSetKey
	// PortKey is a named-port IP set member's key.
	PortKey = palisadePortKey
	// FailsafeKey is a failsafe port's key.
	FailsafeKey = palisadeFailsafeKey
	// CTKey and CTValue are a conntrack entry.
	CTKey   = palisadeCtKey
	CTValue = palisadeCtValue
	// FragKey is a fragmented packet's entry.
	FragKey = palisadeFragKey
	// CounterKey is a packet counter's key; CounterValue its value on one
	// CPU (the map is per CPU: sum them).
	CounterKey   = palisadeCounterKey
	CounterValue = palisadeCounterValue
	// ServiceKey and ServiceValue are a Service frontend (c/nat.h).
	ServiceKey   = palisadeSvcKey
	ServiceValue = palisadeSvcValue
	// BackendKey and BackendValue are a frontend's backend by index;
	// BackendLiveKey a backend by address, whatever its index.
	BackendKey     = palisadeBeKey
	BackendValue   = palisadeBeValue
	BackendLiveKey = palisadeBeLiveKey
	// NATKey and NATValue are one flow's translation.
	NATKey   = palisadeNatKey
	NATValue = palisadeNatValue
	// AffinityKey and AffinityValue are a client's affinity to a backend
	// of a Service port.
	AffinityKey   = palisadeAffKey
	AffinityValue = palisadeAffValue
	// MaglevKey is a slot of a frontend's Maglev table (its value a
	// BackendValue).
	MaglevKey = palisadeMaglevKey
	// NATConfig is what felix tells the programs of the node
	// (MapNATConfig's one entry).
	NATConfig = palisadeNatCfg
	// DSRKey is a bpfDSROptoutCIDRs entry (LPM).
	DSRKey = palisadeDsrKey
	// NodeKey is a node's address (MapNodes), and a floating IP's
	// (MapFloating).
	NodeKey = palisadeNatAddr
	// FloatingValue is a floating IP's workload: its own address and
	// interface.
	FloatingValue = palisadeFipValue
	// NodePorts are the node ports, a bit each (MapNodePorts' one entry).
	NodePorts = palisadeNodeports
	// ID6Key is an IPv6 prefix's key in MapID6 (the policy engine's
	// identities of IPv6 addresses, by generation).
	ID6Key = palisadeId6Key
)

// Map names, as in c/palisade.c; generated programs refer to maps by
// these names.
const (
	MapState    = "pal_state"
	MapEndpoint = "pal_ep"
	MapProgs    = "pal_progs"
	MapSrc      = "pal_src"
	MapSets     = "pal_sets"
	MapPorts    = "pal_ports"
	MapFailsafe = "pal_failsafe"
	MapCT       = "pal_ct"
	MapFrag     = "pal_frag"
	MapCounters = "pal_counters"
	MapEvents   = "pal_events"
	// Service load balancing (c/nat.h).
	MapServices     = "pal_svc"
	MapBackends     = "pal_be"
	MapBackendsLive = "pal_be_live"
	MapNAT          = "pal_nat"
	MapAffinity     = "pal_aff"
	MapMaglev       = "pal_maglev"
	MapNodes        = "pal_nodes"
	MapDSROptout    = "pal_dsr_optout"
	MapNATConfig    = "pal_natcfg"
	MapFloating     = "pal_fip"
	MapNodePorts    = "pal_nodeports"
	// The policy engine (c/engine.h): its data, and the identities of
	// IPv6 addresses.
	MapPolicy = "pal_pol"
	MapID6    = "pal_id6"
)

// NAT flow entries (NATValue.Kind, Flags; c/nat.h).
const (
	NATForward = 1
	NATReverse = 2
	NATHairpin = 3
	NATTunnel  = 4

	NATFlagHairpin = 0x01
	NATFlagTunnel  = 0x02
	NATFlagHost    = 0x04
	NATFlagDSR     = 0x08
	NATFlagFinC    = 0x10
	NATFlagFinB    = 0x20
	NATFlagRST     = 0x40
	NATFlagFIP     = 0x80
)

// Frontend flags (ServiceValue.Flags) and the node's NAT settings
// (NATConfig.Flags).
const (
	ServiceExternal      = 0x1
	ServiceNodePort      = 0x2
	ServiceExternalLocal = 0x4
	ServiceInternalLocal = 0x8

	NATConfigDSR = 0x1
	// NATConfigFloating: a workload of the node has a floating IP.
	NATConfigFloating = 0x2
)

// TunnelPort is the UDP port of the node port tunnel (VXLAN): not
// Calico's vxlanPort, whose device the VXLAN overlay may hold.
const TunnelPort = 4792

// Stages (PAL_STAGE_*): one policy program each. In is a packet arriving
// on the interface (TCX ingress), Out one leaving by it.
const (
	StageUntrackedIn = iota
	StagePreDNATIn
	StageNormalIn
	StageForwardIn
	StageUntrackedOut
	StageNormalOut
	StageForwardOut
	Stages
)

// StageGeneral is the stage of the counters that no rule decided
// (CounterKey.Stage).
const StageGeneral = 0xff

// StageNames name the stages in dumps.
var StageNames = [Stages]string{"untracked-in", "prednat-in", "normal-in", "forward-in", "untracked-out", "normal-out", "forward-out"}

// Verdicts a policy program leaves in State.Verdict.
const (
	VerdictNone  = 0
	VerdictAllow = 1
	VerdictDeny  = 2
)

// Endpoint.Flags.
const (
	EndpointWorkload   = 0x1
	EndpointHost       = 0x2
	EndpointBlocked    = 0x4
	EndpointToHostDrop = 0x8
	// EndpointData is a host data interface (bpfDataIfacePattern) whose
	// ingress program sends established flows to local workloads on.
	EndpointData = 0x10
	// EndpointVeth: the interface is a veth and bpfRedirectToPeer is not
	// Disabled (its workload's packets may go straight to its peer).
	EndpointVeth = 0x20
	// EndpointPeerL3: a data interface without an Ethernet header (an L3
	// device) whose packets may go straight to a veth workload's peer,
	// given one (bpfRedirectToPeer Enabled).
	EndpointPeerL3 = 0x40
	// EndpointTunnel is the node port tunnel's device.
	EndpointTunnel = 0x80
)

// Kinds of interface, by their entry programs: a workload's, a host
// endpoint's, a host data interface's (both hooks), the node port
// tunnel's device (ingress only).
const (
	KindWorkload = iota
	KindHost
	KindData
	KindTunnel
	Kinds
)

// KindHooks are the hooks a kind's entry programs are attached to.
func KindHooks(kind int) []Hook {
	if kind == KindTunnel {
		return []Hook{In}
	}
	return []Hook{In, Out}
}

// MarkSeen is set on every packet an ingress program lets through
// (PAL_MARK_SEEN).
const MarkSeen = 0x01000000

// AttachedGroup is the device group felix gives a workload interface
// once both its hooks run the entry programs; until then the iptables
// guard drops what is forwarded to it (its route may be there already:
// the CNI plugin adds it).
const AttachedGroup = 0x5041

// Reasons are the general counters (PAL_C_*), by slot.
var Reasons = []string{
	"allowed: established flow",
	"allowed: ICMP error of a tracked flow",
	"dropped: source address not the workload's",
	"dropped: unknown workload interface",
	"dropped: to the host (defaultEndpointToHostAction Drop)",
	"allowed: failsafe port",
	"allowed: forwarded, no applyOnForward policy",
	"dropped: fragment of no allowed packet",
	"dropped: malformed IP header",
	"allowed: from the host to a local workload",
	"allowed: IPv6 neighbour discovery",
	"allowed, not tracked: conntrack map full",
	"dropped: stage program missing",
	"dropped: interface without endpoint entry",
	"allowed: preDNAT policy",
	"allowed: doNotTrack policy",
	"allowed: later fragment of an allowed packet",
	ReasonForwarded,
	"rejected: Service without backends (ICMP unreachable), or a flow whose backend left (TCP reset)",
	"dropped: Service with no backend its Local traffic policy allows here",
	"sent: node port tunnel to the backend's node",
	"dropped: node port tunnel from no known node",
}

// ReasonForwarded is the general counter of packets the programs sent on
// themselves (host conntrack bypass).
const ReasonForwarded = "forwarded: established, host conntrack bypassed"

// Fixed slots: the first slots of MapProgs hold the resume programs and
// the forward program (SlotForward, PAL_SLOT_FWD); policy programs take
// the slots from FirstPolicySlot.
const (
	ResumeWorkloadIn = iota
	ResumeWorkloadOut
	ResumeHostIn
	ResumeHostOut
	SlotForward
	FirstPolicySlot
)

// SetID is the 64-bit id of a calc IP set in the maps: the first bytes of
// its SHA-256, the same in every felix (so a restarted one finds the
// sets it wrote).
func SetID(id string) uint64 {
	sum := sha256.Sum256([]byte(id))
	return binary.BigEndian.Uint64(sum[:8])
}

// Addr16 is an address as the programs see it: IPv6, or IPv4-mapped.
func Addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		return netip.AddrFrom16(a.As16()).As16()
	}
	return a.As16()
}

// mappedV4 is where the programs keep IPv4 addresses in the sets' trie
// (Addr16: IPv4-mapped IPv6).
var mappedV4 = netip.MustParsePrefix("::ffff:0:0/96")

// SetKeys are the pal_sets keys of CIDR p in set id: one, except for an
// IPv6 CIDR covering ::ffff:0:0/96. The programs look IPv4 addresses up
// as IPv4-mapped IPv6 in the same trie, so such a member (::/0, a
// NetworkSet's "all of IPv6") would match every IPv4 address, where an
// IPv6 ipset of the iptables dataplane matches none: it becomes the
// pieces of its prefix outside ::ffff:0:0/96.
func SetKeys(id uint64, p netip.Prefix) []SetKey {
	p = p.Masked()
	key := func(p netip.Prefix) SetKey {
		return SetKey{Prefixlen: uint32(64 + PrefixLen16(p)), IdHi: uint32(id >> 32), IdLo: uint32(id), Addr: Addr16(p.Addr())}
	}
	if !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() > mappedV4.Bits() || !p.Contains(mappedV4.Addr()) {
		return []SetKey{key(p)}
	}
	var keys []SetKey
	v4 := mappedV4.Addr().As16()
	for bits := p.Bits(); bits < mappedV4.Bits(); bits++ {
		// The prefix of length bits+1 that agrees with ::ffff:0:0/96 on
		// its first bits and differs on the next one.
		a := v4
		a[bits/8] ^= 0x80 >> (bits % 8)
		keys = append(keys, key(netip.PrefixFrom(netip.AddrFrom16(a), bits+1).Masked()))
	}
	return keys
}

// Src4 is an IPv4 address as Endpoint.Src4 holds it: its four bytes in
// network order, read as the program reads them (host order); 0 for an
// address that is not IPv4.
func Src4(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// PrefixLen16 is a prefix's length in the 128-bit form of Addr16.
func PrefixLen16(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 96 + p.Bits()
	}
	return p.Bits()
}
