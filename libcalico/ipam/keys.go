package ipam

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Key layout under datastore.IPAMPrefix, as Calico writes it.
const (
	blocksPrefix     = datastore.IPAMPrefix + "assignment/"
	affinitiesPrefix = datastore.IPAMPrefix + "host/"
	handlesPrefix    = datastore.IPAMPrefix + "handle/"
)

// family is "ipv4" or "ipv6" for an address.
func family(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}

// familyOf is "ipv4" or "ipv6" for an IP version.
func familyOf(version int) string {
	if version == 4 {
		return "ipv4"
	}
	return "ipv6"
}

// cidrSegment writes a prefix as a key segment: 10.0.0.0-26.
func cidrSegment(p netip.Prefix) string {
	return p.Addr().String() + "-" + strconv.Itoa(p.Bits())
}

// parseCIDRSegment reads a key segment written by cidrSegment.
func parseCIDRSegment(s string) (netip.Prefix, error) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("block segment %q has no '-'", s)
	}
	p, err := netip.ParsePrefix(s[:i] + "/" + s[i+1:])
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("block segment %q: %w", s, err)
	}
	return p, nil
}

// blockKey is the key of the block for prefix.
func blockKey(p netip.Prefix) string {
	return blocksPrefix + family(p.Addr()) + "/block/" + cidrSegment(p)
}

// blocksFamilyPrefix selects every block of an IP version.
func blocksFamilyPrefix(version int) string {
	return blocksPrefix + familyOf(version) + "/block/"
}

// parseBlockKey returns the prefix a block key names.
func parseBlockKey(key string) (netip.Prefix, error) {
	i := strings.LastIndexByte(key, '/')
	if !strings.HasPrefix(key, blocksPrefix) || i < 0 {
		return netip.Prefix{}, fmt.Errorf("key %q is not a block key", key)
	}
	return parseCIDRSegment(key[i+1:])
}

// affinityKey is the key of host's affinity to the block for prefix.
func affinityKey(host string, p netip.Prefix) string {
	return affinitiesPrefix + host + "/" + family(p.Addr()) + "/block/" + cidrSegment(p)
}

// hostAffinitiesPrefix selects host's affinities of an IP version.
func hostAffinitiesPrefix(host string, version int) string {
	return affinitiesPrefix + host + "/" + familyOf(version) + "/block/"
}

// parseAffinityKey returns the host and prefix an affinity key names.
func parseAffinityKey(key string) (string, netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, affinitiesPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || parts[0] == "" || parts[2] != "block" {
		return "", netip.Prefix{}, fmt.Errorf("key %q is not an affinity key", key)
	}
	p, err := parseCIDRSegment(parts[3])
	if err != nil {
		return "", netip.Prefix{}, fmt.Errorf("key %q: %w", key, err)
	}
	return parts[0], p, nil
}

// handleKey is the key of a handle.
func handleKey(id string) string { return handlesPrefix + id }

// checkName rejects host names and handle IDs that would break the key
// layout.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s must not be empty: %w", what, ErrInvalid)
	}
	if strings.Contains(s, "/") {
		return fmt.Errorf("%s %q must not contain '/': %w", what, s, ErrInvalid)
	}
	return nil
}
