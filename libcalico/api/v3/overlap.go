package v3

import (
	"fmt"
	"net/netip"
)

// CIDRsOverlap reports whether two CIDRs share any address. An IPv4 and an
// IPv6 CIDR never overlap.
func CIDRsOverlap(a, b string) (bool, error) {
	pa, err := netip.ParsePrefix(a)
	if err != nil {
		return false, fmt.Errorf("CIDR %q: %w", a, err)
	}
	pb, err := netip.ParsePrefix(b)
	if err != nil {
		return false, fmt.Errorf("CIDR %q: %w", b, err)
	}
	return pa.Masked().Overlaps(pb.Masked()), nil
}

// FindOverlap returns the indexes i < j of the first pair of overlapping
// CIDRs in the list. Entries that do not parse are skipped (validation
// reports them).
func FindOverlap(cidrs []string) (i, j int, found bool) {
	ps := make([]netip.Prefix, len(cidrs))
	ok := make([]bool, len(cidrs))
	for k, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		ps[k], ok[k] = p.Masked(), err == nil
	}
	for i = range ps {
		if !ok[i] {
			continue
		}
		for j = i + 1; j < len(ps); j++ {
			if ok[j] && ps[i].Overlaps(ps[j]) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}
