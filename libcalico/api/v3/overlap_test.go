package v3

import "testing"

func TestCIDRsOverlap(t *testing.T) {
	tests := []struct {
		a, b    string
		want    bool
		wantErr string
	}{
		{"10.0.0.0/8", "10.1.0.0/16", true, ""},
		{"10.1.0.0/16", "10.0.0.0/8", true, ""},
		{"10.0.0.0/16", "10.1.0.0/16", false, ""},
		{"10.0.0.0/24", "10.0.0.255/32", true, ""},
		{"10.0.0.1/16", "10.0.200.0/24", true, ""}, // host bits ignored
		{"fd00::/8", "fd12::/16", true, ""},
		{"10.0.0.0/8", "::/0", false, ""},
		{"10.0.0.0/33", "10.0.0.0/8", false, `CIDR "10.0.0.0/33": netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`},
	}
	for _, tt := range tests {
		got, err := CIDRsOverlap(tt.a, tt.b)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.wantErr {
			t.Errorf("CIDRsOverlap(%s, %s) = %t, %q; want %t, %q", tt.a, tt.b, got, gotErr, tt.want, tt.wantErr)
		}
	}
}

func TestFindOverlap(t *testing.T) {
	tests := []struct {
		cidrs []string
		i, j  int
		found bool
	}{
		{[]string{"10.0.0.0/16", "10.1.0.0/16", "fd00::/8"}, 0, 0, false},
		{[]string{"10.0.0.0/16", "192.168.0.0/16", "10.0.128.0/17"}, 0, 2, true},
		{[]string{"bad", "fd00::/8", "fd00:1::/32"}, 1, 2, true},
		{nil, 0, 0, false},
	}
	for _, tt := range tests {
		i, j, found := FindOverlap(tt.cidrs)
		if i != tt.i || j != tt.j || found != tt.found {
			t.Errorf("FindOverlap(%v) = %d, %d, %t; want %d, %d, %t", tt.cidrs, i, j, found, tt.i, tt.j, tt.found)
		}
	}
}
