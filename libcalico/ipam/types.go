package ipam

import (
	"net/netip"
	"time"
)

// Intent is what an address will be used for; a pool serves only the
// intents its spec.allowedUses lists (Workload and Tunnel when it lists
// none).
type Intent string

// Intents.
const (
	IntentWorkload Intent = "Workload"
	IntentTunnel   Intent = "Tunnel"
	// IntentLoadBalancer is a Service's LoadBalancer address; only pools
	// listing LoadBalancer serve it, and those serve nothing else.
	IntentLoadBalancer Intent = "LoadBalancer"
)

// LoadBalancerHost is the virtual node LoadBalancer addresses are
// assigned for (their blocks are affine to it), as Calico's.
const LoadBalancerHost = "load-balancer"

// AutoAssignArgs asks for addresses chosen by IPAM.
type AutoAssignArgs struct {
	// Num4 and Num6 are how many IPv4 and IPv6 addresses to assign.
	Num4, Num6 int
	// HandleID groups the addresses for release by handle; optional.
	HandleID string
	// Attrs are stored with each address (namespace, pod, node...).
	Attrs map[string]string
	// Hostname is the node the addresses are for.
	Hostname string
	// IPv4Pools and IPv6Pools restrict assignment to these pools, named by
	// pool name or CIDR; empty means every enabled pool selecting the node.
	IPv4Pools, IPv6Pools []string
	// NamespaceLabels are the labels of the workload's namespace, matched
	// against the pools' namespaceSelector when the pools are not named
	// in IPv4Pools/IPv6Pools; nil is a namespace without labels.
	NamespaceLabels map[string]string
	// MaxBlocksPerHost caps the blocks the node may claim; 0 uses the
	// IPAM configuration, and when that is 0 too, 20.
	MaxBlocksPerHost int
	// Intent is the use the addresses are for; Workload when empty.
	Intent Intent
	// NewHandle makes the assignment fail with ErrAlreadyAssigned when
	// HandleID exists already or is written by someone else meanwhile:
	// the handle of a sticky reservation is created once, by one
	// assignment.
	NewHandle bool
}

// Assignments are the addresses of one family AutoAssign handed out.
type Assignments struct {
	// IPs are the addresses, with the prefix length of their block.
	IPs []netip.Prefix
	// IPVersion is 4 or 6.
	IPVersion int
	// NumRequested is how many were asked for.
	NumRequested int
}

// AssignIPArgs asks for one specific address.
type AssignIPArgs struct {
	IP       netip.Addr
	HandleID string
	Attrs    map[string]string
	// Hostname is the node a block created for the address is affine to;
	// empty creates it without affinity.
	Hostname string
	// Intent, when set, is the use the address is for: its pool must
	// allow it (ErrNoPools otherwise). Empty skips the check.
	Intent Intent
}

// Allocation is one allocated address and who holds it.
type Allocation struct {
	IP       netip.Addr
	HandleID string
	Attrs    map[string]string
	// SequenceNumber is the block's sequence number when the address was
	// allocated: a release given it frees only this allocation.
	SequenceNumber uint64
}

// ReleaseOptions names an address to release and, optionally, what must
// still hold for it to be released: that Handle holds it, and that it was
// allocated at SequenceNumber. A release with them never frees an address
// that was released and handed out again meanwhile.
type ReleaseOptions struct {
	Address        netip.Addr
	Handle         string
	SequenceNumber *uint64
}

// Block is a read-only view of an allocation block.
type Block struct {
	CIDR netip.Prefix
	// Host is the node the block is affine to, "" when none.
	Host string
	// Allocations lists the allocated addresses in address order.
	Allocations []Allocation
	// Free counts unallocated addresses.
	Free int
	// Cooling lists the released addresses still cooling down
	// (ipCooldownSeconds): neither free nor held by anyone.
	Cooling []netip.Addr
	// Revision is the block's etcd mod revision.
	Revision int64
}

// AffinityState is where a node's claim on a block stands.
type AffinityState string

// Affinity states, as Calico stores them.
const (
	AffinityPending         AffinityState = "pending"
	AffinityConfirmed       AffinityState = "confirmed"
	AffinityPendingDeletion AffinityState = "pendingDeletion"
)

// Affinity is a node's claim on a block.
type Affinity struct {
	Host     string
	CIDR     netip.Prefix
	State    AffinityState
	Revision int64
}

// Handle is how many addresses a handle holds in each block.
type Handle struct {
	ID       string
	Blocks   map[netip.Prefix]int
	Revision int64
}

// Config is the cluster-wide IPAM configuration.
type Config struct {
	// StrictAffinity forbids borrowing from other nodes' blocks.
	StrictAffinity bool
	// AutoAllocateBlocks lets nodes claim new blocks (default true).
	AutoAllocateBlocks bool
	// MaxBlocksPerHost caps the blocks a node may claim; 0 is no cap.
	MaxBlocksPerHost int
	// IPCooldown (ipCooldownSeconds) keeps a released address out of use
	// this long; 0 frees it at once.
	IPCooldown time.Duration
}

// UtilizationOptions selects the pools GetUtilization reports.
type UtilizationOptions struct {
	// Pools are pool names or CIDRs; empty means every pool.
	Pools []string
}

// PoolUtilization is how full one pool is.
type PoolUtilization struct {
	Name string
	CIDR netip.Prefix
	// Capacity is the number of addresses in the pool.
	Capacity uint64
	// InUse counts allocated addresses in the pool's blocks.
	InUse uint64
	// Blocks are the pool's existing blocks, in address order.
	Blocks []BlockUtilization
}

// Free is the number of addresses not in use.
func (p PoolUtilization) Free() uint64 { return p.Capacity - p.InUse }

// BlockUtilization is how full one block is.
type BlockUtilization struct {
	CIDR     netip.Prefix
	Host     string
	Capacity int
	InUse    int
}
