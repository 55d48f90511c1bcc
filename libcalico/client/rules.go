package client

import (
	"net/netip"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// checkImmutable refuses an update that changes a field fixed at creation.
// old is the stored resource, new the prepared replacement.
func checkImmutable(old, new v3.Resource) error {
	switch n := new.(type) {
	case *v3.IPPool:
		o, ok := old.(*v3.IPPool)
		if !ok {
			return nil
		}
		if !sameCIDR(o.Spec.CIDR, n.Spec.CIDR) {
			return ruleErrorf(ErrImmutable, "IPPool %q: spec.cidr is immutable: cannot change %s to %s", n.Name, o.Spec.CIDR, n.Spec.CIDR)
		}
		if o.Spec.BlockSize != n.Spec.BlockSize {
			return ruleErrorf(ErrImmutable, "IPPool %q: spec.blockSize is immutable: cannot change %d to %d", n.Name, o.Spec.BlockSize, n.Spec.BlockSize)
		}
	}
	return nil
}

// sameCIDR compares two CIDRs by their masked prefix, so "10.0.0.1/16"
// and "10.0.0.0/16" are the same network.
func sameCIDR(a, b string) bool {
	pa, errA := netip.ParsePrefix(a)
	pb, errB := netip.ParsePrefix(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return pa.Masked() == pb.Masked()
}

// hasCrossRules says whether resources of kind are checked against other
// resources before a write (so batches of them are written in order).
func hasCrossRules(kind string) bool {
	return kind == v3.KindIPPool
}

// checkCross checks r against the other resources of its kind in state
// (keyed by path; r's own entry, if any, is skipped).
func checkCross(r v3.Resource, state map[string]v3.Resource, ownPath string) error {
	pool, ok := r.(*v3.IPPool)
	if !ok {
		return nil
	}
	mine, err := netip.ParsePrefix(pool.Spec.CIDR)
	if err != nil {
		return nil // validation reports a bad CIDR
	}
	mine = mine.Masked()
	var clash *v3.IPPool
	for path, other := range state {
		o, ok := other.(*v3.IPPool)
		if !ok || path == ownPath {
			continue
		}
		p, err := netip.ParsePrefix(o.Spec.CIDR)
		if err != nil || !p.Masked().Overlaps(mine) {
			continue
		}
		// Report the first clash by name so the message is stable.
		if clash == nil || o.Name < clash.Name {
			clash = o
		}
	}
	if clash != nil {
		return ruleErrorf(ErrOverlap, "IPPool %q (%s) overlaps IPPool %q (%s)", pool.Name, pool.Spec.CIDR, clash.Name, clash.Spec.CIDR)
	}
	return nil
}
