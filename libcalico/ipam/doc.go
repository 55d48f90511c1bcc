// Package ipam allocates workload and tunnel addresses from IP pools the
// way Calico does: pools are cut into blocks (/26 and /122 by default),
// each block is claimed by one node (its affinity) and addresses are handed
// out from a node's own blocks first, then from newly claimed blocks, then,
// unless strictAffinity is set, borrowed from other nodes' blocks.
//
// State lives in etcd under /calico/ipam/v2/ with Calico's layout and JSON:
//
//	assignment/ipv4/block/10.0.0.0-26   an allocation block
//	host/<node>/ipv4/block/10.0.0.0-26  a node's affinity to a block
//	handle/<handleID>                   how many addresses a handle holds per block
//
// Every write is a compare-and-swap on the key's mod revision, retried a
// bounded number of times, so concurrent allocators (goroutines or
// processes, for the same or different nodes) never hand out one address
// twice nor lose an update. AutoAssign and ReleaseByHandle write a block
// and its handle in one transaction (datastore.KV.Txn). AutoAssign's is
// also conditional on the pools, reservations, IPAM configuration, node
// labels and affinity it decided with, so an Allocator may keep them (and
// the blocks' last known values) between calls: a warm assignment is one
// round trip, and anything stale fails the transaction and is read again.
// When a node's blocks are contended by several long-lived Allocators,
// each starts at a block of its own and, while the pools are mostly
// unclaimed, the node claims up to a few extra blocks to spread over.
// AssignIP and ReleaseIPs increment a handle before the block write that
// uses it and decrement it after the block write that frees it, so a
// crash leaves a handle over-counted (found and cleaned by release by
// handle), never an allocation without its handle.
//
// Stored values IPAM cannot use — pools whose CIDR, block size or node
// selector do not parse, and blocks, affinities and handles that do not
// decode — are skipped, each logged once and counted (BadValues): no
// address is handed out of them, none is overwritten, and they never stop
// the rest from being used. A handle whose record does not decode is
// released through its blocks' allocations.
//
// The package imports only the datastore interfaces, the v3 API types and
// the selector language, so the calico-ipam CNI plugin stays lean.
package ipam
