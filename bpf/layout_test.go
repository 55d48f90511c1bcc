package bpf

import (
	"net/netip"
	"testing"
)

// lpmMatch says whether a key matches address a of set id, as the
// kernel's LPM trie would: the set id and the first Prefixlen-64 bits of
// the address agree.
func lpmMatch(k SetKey, id uint64, a netip.Addr) bool {
	if k.IdHi != uint32(id>>32) || k.IdLo != uint32(id) {
		return false
	}
	p, err := netip.AddrFrom16(k.Addr).Prefix(int(k.Prefixlen) - 64)
	return err == nil && p.Contains(netip.AddrFrom16(Addr16(a)))
}

func TestSetKeys(t *testing.T) {
	id := SetID("s:test")
	cases := []struct {
		cidr    string
		keys    int
		in, out []string
	}{
		{"10.0.0.0/8", 1, []string{"10.1.2.3"}, []string{"11.0.0.1", "::a00:1"}},
		{"0.0.0.0/0", 1, []string{"1.2.3.4", "255.255.255.255"}, []string{"fd00::1"}},
		{"fd00::/64", 1, []string{"fd00::1"}, []string{"fd01::1", "10.0.0.1"}},
		// Covers ::ffff:0:0/96, where IPv4 addresses live: split so
		// that it matches every IPv6 address and no IPv4 one.
		{"::/0", 96, []string{"::1", "fd00::1", "2001:db8::1", "::fffe:0:1", "::1:0:0:0", "ffff::"}, []string{"1.2.3.4", "0.0.0.0", "255.255.255.255"}},
		{"::/64", 32, []string{"::1", "::fffe:1:2"}, []string{"10.0.0.1", "fd00::1"}},
		// A member inside the mapped range is what Palisade writes for
		// no set; kept as one key.
		{"::ffff:0:0/96", 1, nil, []string{"fd00::1"}},
	}
	for _, c := range cases {
		keys := SetKeys(id, netip.MustParsePrefix(c.cidr))
		if len(keys) != c.keys {
			t.Errorf("%s: %d keys, want %d", c.cidr, len(keys), c.keys)
		}
		match := func(a string) bool {
			for _, k := range keys {
				if lpmMatch(k, id, netip.MustParseAddr(a)) {
					return true
				}
			}
			return false
		}
		for _, a := range c.in {
			if !match(a) {
				t.Errorf("%s: %s not matched", c.cidr, a)
			}
		}
		for _, a := range c.out {
			if match(a) {
				t.Errorf("%s: %s matched", c.cidr, a)
			}
		}
		for _, a := range c.in {
			if lpmMatch(keys[0], SetID("s:other"), netip.MustParseAddr(a)) {
				t.Errorf("%s: %s matched in another set", c.cidr, a)
			}
		}
	}
}
