package etcdcore

import "testing"

func TestPrefixEnd(t *testing.T) {
	cases := []struct {
		name, prefix, want string
	}{
		{"plain", "/calico/ipam/", "/calico/ipam0"},
		{"last byte 0xff carried", "a\xff", "b"},
		{"only 0xff bytes", "\xff\xff", "\x00"},
		{"empty", "", "\x00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PrefixEnd(tc.prefix); got != tc.want {
				t.Errorf("PrefixEnd(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		})
	}
}
