package ipam

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/selector"
)

// Default block sizes, as Calico's.
const (
	defaultBlockSize4 = 26
	defaultBlockSize6 = 122
)

// pool is an IP pool as IPAM needs it, parsed once per request.
type pool struct {
	name      string
	cidr      netip.Prefix
	blockBits int
	disabled  bool
	manual    bool
	selector  *selector.Selector // nil selects every node
	// nsSelector is the pool's namespaceSelector; nil selects every
	// namespace.
	nsSelector *selector.Selector
	uses       []v3.IPPoolAllowedUse
}

// parsePool checks and parses a v3 IP pool.
func parsePool(p *v3.IPPool) (pool, error) {
	out := pool{name: p.Name, disabled: p.Spec.Disabled, uses: p.Spec.AllowedUses}
	cidr, err := netip.ParsePrefix(p.Spec.CIDR)
	if err != nil {
		return pool{}, fmt.Errorf("ippool %q: spec.cidr %q: %w", p.Name, p.Spec.CIDR, err)
	}
	out.cidr = cidr.Masked()
	out.blockBits = p.Spec.BlockSize
	if out.blockBits == 0 {
		out.blockBits = defaultBlockSize4
		if cidr.Addr().Is6() {
			out.blockBits = defaultBlockSize6
		}
	}
	bitLen := cidr.Addr().BitLen()
	if out.blockBits < cidr.Bits() || out.blockBits > bitLen || bitLen-out.blockBits > 16 {
		return pool{}, fmt.Errorf("ippool %q: spec.blockSize %d does not fit spec.cidr %s: %w", p.Name, out.blockBits, out.cidr, ErrInvalid)
	}
	if s := p.Spec.NodeSelector; s != "" && s != "all()" {
		sel, err := selector.Parse(s)
		if err != nil {
			return pool{}, fmt.Errorf("ippool %q: spec.nodeSelector %q: %w", p.Name, s, err)
		}
		out.selector = sel
	}
	if s := p.Spec.NamespaceSelector; s != "" {
		sel, err := selector.Parse(s)
		if err != nil {
			return pool{}, fmt.Errorf("ippool %q: spec.namespaceSelector %q: %w", p.Name, s, err)
		}
		out.nsSelector = sel
	}
	if p.Spec.AssignmentMode != nil && *p.Spec.AssignmentMode == v3.AssignmentManual {
		out.manual = true
	}
	return out, nil
}

// version is 4 or 6.
func (p pool) version() int {
	if p.cidr.Addr().Is4() {
		return 4
	}
	return 6
}

// allows reports whether the pool serves intent. A pool listing no uses
// has Calico's default, Workload and Tunnel: LoadBalancer addresses come
// only from pools that name that use.
func (p pool) allows(intent Intent) bool {
	if len(p.uses) == 0 {
		return intent != IntentLoadBalancer
	}
	return slices.Contains(p.uses, v3.IPPoolAllowedUse(intent))
}

// selects reports whether the pool's node selector matches labels.
func (p pool) selects(labels map[string]string) bool {
	return p.selector == nil || p.selector.Evaluate(selector.MapLabels(labels))
}

// selectsNamespace reports whether the pool's namespace selector matches
// the labels of the workload's namespace. As in Calico, a workload whose
// namespace is not known is matched as a namespace without labels.
func (p pool) selectsNamespace(labels map[string]string) bool {
	return p.nsSelector == nil || p.nsSelector.Evaluate(selector.MapLabels(labels))
}

// blockFor returns the block of the pool holding addr.
func (p pool) blockFor(addr netip.Addr) netip.Prefix {
	b, _ := addr.Prefix(p.blockBits)
	return b
}

// numBlocks is how many blocks the pool holds (saturating at 2^63).
func (p pool) numBlocks() uint64 {
	if p.blockBits-p.cidr.Bits() > 63 {
		return 1 << 63
	}
	return 1 << (p.blockBits - p.cidr.Bits())
}

// nthBlock returns block i of the pool; i must be below blockIndexLimit.
func (p pool) nthBlock(i uint64) netip.Prefix {
	hostBits := p.cidr.Addr().BitLen() - p.blockBits
	return netip.PrefixFrom(addOffset(p.cidr.Addr(), i<<hostBits), p.blockBits)
}

// blockIndexLimit is how many blocks of the pool IPAM considers: all of
// them, except in IPv6 pools so large that block offsets would not fit in
// 63 bits, where the first 2^(63-hostBits) blocks are more than etcd could
// ever hold.
func (p pool) blockIndexLimit() uint64 {
	hostBits := p.cidr.Addr().BitLen() - p.blockBits
	if p.blockBits-p.cidr.Bits()+hostBits > 63 {
		return 1 << (63 - hostBits)
	}
	return p.numBlocks()
}

// candidateBlocks calls yield with the pool's blocks in the order host
// tries to claim them: starting at a position derived from the host name,
// so different nodes rarely race for the same block, and wrapping round.
// It stops when yield returns false.
func (p pool) candidateBlocks(host string, yield func(netip.Prefix) bool) {
	n := p.blockIndexLimit()
	h := fnv.New64a()
	h.Write([]byte(host))
	start := h.Sum64() % n
	for i := uint64(0); i < n; i++ {
		if !yield(p.nthBlock((start + i) % n)) {
			return
		}
	}
}

// choosePools returns the pools of one IP version a request may use, in
// name order. requested names pools by name or CIDR: when set, exactly
// those are used (each must exist and be enabled; node and namespace
// selectors do not apply, as in Calico); otherwise every enabled,
// non-manual pool whose node selector matches labels and whose namespace
// selector matches nsLabels. Either way the pool must allow intent.
func choosePools(all []pool, version int, requested []string, labels, nsLabels map[string]string, intent Intent) ([]pool, error) {
	var out []pool
	if len(requested) > 0 {
		for _, r := range requested {
			p, ok := findPool(all, r)
			if !ok || p.disabled || p.version() != version {
				return nil, fmt.Errorf("requested pool %q: %w", r, ErrPoolNotUsable)
			}
			if p.allows(intent) && !slices.ContainsFunc(out, func(q pool) bool { return q.name == p.name }) {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("requested IPv%d pools %v allow no %s use: %w", version, requested, intent, ErrNoPools)
		}
		return out, nil
	}
	for _, p := range all {
		if p.version() == version && !p.disabled && !p.manual && p.selects(labels) && p.selectsNamespace(nsLabels) && p.allows(intent) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no enabled IPv%d pool selects this node and namespace for %s use: %w", version, intent, ErrNoPools)
	}
	return out, nil
}

// findPool finds a pool by name or CIDR.
func findPool(all []pool, nameOrCIDR string) (pool, bool) {
	cidr, cidrErr := netip.ParsePrefix(nameOrCIDR)
	for _, p := range all {
		if p.name == nameOrCIDR || (cidrErr == nil && p.cidr == cidr.Masked()) {
			return p, true
		}
	}
	return pool{}, false
}

// poolFor returns the pool containing addr, the most specific when pools
// overlap.
func poolFor(all []pool, addr netip.Addr) (pool, bool) {
	var best pool
	found := false
	for _, p := range all {
		if p.cidr.Contains(addr) && (!found || p.cidr.Bits() > best.cidr.Bits()) {
			best, found = p, true
		}
	}
	return best, found
}

// reservations are the CIDRs of every IPReservation.
type reservations []netip.Prefix

// parseReservations collects the reserved CIDRs; a bare address counts as
// a /32 or /128. An entry that is neither is passed to bad and left out
// (the reservation's other entries still count).
func parseReservations(rs []*v3.IPReservation, bad func(*v3.IPReservation, error)) reservations {
	var out reservations
	for _, r := range rs {
		for _, c := range r.Spec.ReservedCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				a, aerr := netip.ParseAddr(c)
				if aerr != nil {
					bad(r, fmt.Errorf("ipreservation %q: spec.reservedCIDRs %q: %w", r.Name, c, err))
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			out = append(out, p.Masked())
		}
	}
	return out
}

// contains reports whether addr is reserved.
func (r reservations) contains(addr netip.Addr) bool {
	for _, p := range r {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// covers reports whether every address of block is reserved.
func (r reservations) covers(block netip.Prefix) bool {
	for _, p := range r {
		if p.Bits() <= block.Bits() && p.Contains(block.Addr()) {
			return true
		}
	}
	return false
}

// skip is the filter block.assign uses; nil when nothing is reserved.
func (r reservations) skip() func(netip.Addr) bool {
	if len(r) == 0 {
		return nil
	}
	return r.contains
}
