package ipam

import (
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// BlocksPrefix is the prefix of every allocation block key, for readers
// that follow the blocks themselves (felix's route resolver).
const BlocksPrefix = blocksPrefix

// Allocation attributes, as Calico's IPAM stores them.
const (
	// AttrNode names the node an address was handed out for.
	AttrNode = "node"
	// AttrType says what a node's own address is for.
	AttrType = "type"
	// AttrTypeVXLAN and AttrTypeVXLANV6 mark a node's VXLAN tunnel
	// addresses.
	AttrTypeVXLAN   = "vxlanTunnelAddress"
	AttrTypeVXLANV6 = "vxlanV6TunnelAddress"
)

// VXLANTunnelHandle is the handle of a node's VXLAN tunnel address of one
// IP version, as Calico names it: vxlan-tunnel-addr-<node> and
// vxlan-v6-tunnel-addr-<node>.
func VXLANTunnelHandle(node string, version int) string {
	if version == 6 {
		return "vxlan-v6-tunnel-addr-" + node
	}
	return "vxlan-tunnel-addr-" + node
}

// VXLANTunnelAttrs are the attributes of a node's VXLAN tunnel address.
func VXLANTunnelAttrs(node string, version int) map[string]string {
	t := AttrTypeVXLAN
	if version == 6 {
		t = AttrTypeVXLANV6
	}
	return map[string]string{AttrNode: node, AttrType: t}
}

// AffinitiesPrefix is the prefix of every block affinity key; a node's
// own are under AffinitiesPrefix + <node> + "/".
const AffinitiesPrefix = affinitiesPrefix

// ParseAffinity reads a stored affinity (a key under AffinitiesPrefix and
// its value), as ListAffinities returns it.
func ParseAffinity(p datastore.KVPair) (Affinity, error) { return decodeAffinity(p) }

// ParseBlock reads a stored block (a key under BlocksPrefix and its
// value) into the read-only view ListBlocks returns.
func ParseBlock(p datastore.KVPair) (Block, error) {
	b, err := decodeBlock(p.Value)
	if err != nil {
		return Block{}, err
	}
	return Block{CIDR: b.prefix, Host: b.host(), Allocations: b.allocations(), Free: len(b.Unallocated), Revision: p.Revision}, nil
}
