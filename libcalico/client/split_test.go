package client_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/palisade-net/palisade/libcalico/client"
)

func TestSplitCIDR(t *testing.T) {
	cases := []struct {
		cidr  string
		parts int
		want  []string
		err   string
	}{
		{"172.0.0.0/8", 2, []string{"172.0.0.0/9", "172.128.0.0/9"}, ""},
		{"10.0.0.7/24", 4, []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26", "10.0.0.192/26"}, ""},
		{"fd00::/120", 2, []string{"fd00::/121", "fd00::80/121"}, ""},
		{"10.0.0.0/31", 2, []string{"10.0.0.0/32", "10.0.0.1/32"}, ""},
		{"10.0.0.0/32", 2, nil, "the CIDR 10.0.0.0/32 is not large enough to be split into 2 parts"},
		{"10.0.0.0/24", 6, nil, "number to split CIDR into is not a valid power of 2: 6"},
		{"10.0.0.0/24", 0, nil, "number to split CIDR into is not a valid power of 2: 0"},
		{"10.0.0.0/24", -2, nil, "number to split CIDR into is not a valid power of 2: -2"},
	}
	for _, tc := range cases {
		got, err := client.SplitCIDR(netip.MustParsePrefix(tc.cidr), tc.parts)
		var gotS []string
		for _, p := range got {
			gotS = append(gotS, p.String())
		}
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%s/%d: error %v, want %q", tc.cidr, tc.parts, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(gotS, tc.want)):
			t.Errorf("%s/%d: %v, %v; want %v", tc.cidr, tc.parts, gotS, err, tc.want)
		}
	}
}
