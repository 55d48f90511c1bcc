package startup

import (
	"context"
	"strings"
	"testing"
)

func TestParseMethod(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: "first-found"},
		{in: "first-found", want: "first-found"},
		{in: "can-reach=198.18.0.1", want: "can-reach=198.18.0.1"},
		{in: "interface=eth.*,ens3", want: "interface=eth.*,ens3"},
		{in: "skip-interface=eth0", want: "skip-interface=eth0"},
		{in: "cidr=198.18.1.9/24,fd00::/8", want: "cidr=198.18.1.0/24,fd00::/8"},
		{in: "interface=", err: "want first-found"},
		{in: "interface=eth[", err: `regex "eth["`},
		{in: "cidr=198.18.0.0/33", err: `cidr "198.18.0.0/33"`},
		{in: "kubernetes-internal-ip", err: "want first-found"},
		{in: "bogus=x", err: `unknown method "bogus"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseMethod(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseMethod(%q) error = %v, want one containing %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMethod(%q): %v", tc.in, err)
			}
			if m.String() != tc.want {
				t.Errorf("ParseMethod(%q) = %q, want %q", tc.in, m.String(), tc.want)
			}
		})
	}
}

// TestDetect runs every method against interfaces in a namespace. The
// interfaces are made in index order: a Calico device and a veth (both
// excluded by default) before eth0, so first-found must skip them.
func TestDetect(t *testing.T) {
	n := newNS(t)
	n.veth(t, "cali1234", "p-cali", "198.18.9.1/24")
	n.veth(t, "veth-a", "p-veth", "198.18.8.1/24")
	n.veth(t, "eth0", "p-eth0", "198.18.0.2/24", "fd00:198:18::2/64")
	n.veth(t, "eth1", "p-eth1", "198.18.1.2/25", "fd00:198:19::2/80")
	n.veth(t, "down0", "p-down0", "198.18.2.2/24")
	n.ip(t, "link", "set", "down0", "down")
	h := NetlinkHost{Handle: n.handle}

	for _, tc := range []struct {
		method  string
		v6      bool
		want    string
		wantIf  string
		wantErr string
	}{
		{method: "first-found", want: "198.18.0.2/24", wantIf: "eth0"},
		{method: "first-found", v6: true, want: "fd00:198:18::2/64", wantIf: "eth0"},
		{method: "interface=eth1", want: "198.18.1.2/25", wantIf: "eth1"},
		{method: "interface=cali.*", want: "198.18.9.1/24", wantIf: "cali1234"},
		{method: "interface=eth1", v6: true, want: "fd00:198:19::2/80", wantIf: "eth1"},
		{method: "interface=nomatch", wantErr: "no interface matches"},
		{method: "interface=down0", wantErr: "down or have no global IPv4"},
		{method: "skip-interface=eth0", want: "198.18.1.2/25", wantIf: "eth1"},
		{method: "skip-interface=eth.*", wantErr: "no suitable address"},
		{method: "cidr=198.18.1.0/24", want: "198.18.1.2/25", wantIf: "eth1"},
		{method: "cidr=203.0.113.0/24", wantErr: "no up interface has a IPv4 address in those ranges"},
		{method: "can-reach=198.18.1.77", want: "198.18.1.2/25", wantIf: "eth1"},
		{method: "can-reach=198.18.0.9", want: "198.18.0.2/24", wantIf: "eth0"},
		{method: "can-reach=fd00:198:19::9", v6: true, want: "fd00:198:19::2/80", wantIf: "eth1"},
		{method: "can-reach=203.0.113.1", wantErr: "no route to 203.0.113.1"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			m, err := ParseMethod(tc.method)
			if err != nil {
				t.Fatal(err)
			}
			p, ifc, err := Detect(context.Background(), h, m, tc.v6)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Detect(%s) = %v, %v; want error containing %q", tc.method, p, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Detect(%s): %v", tc.method, err)
			}
			if p.String() != tc.want || ifc != tc.wantIf {
				t.Errorf("Detect(%s) = %s on %s, want %s on %s", tc.method, p, ifc, tc.want, tc.wantIf)
			}
		})
	}
}

func TestResolveAddress(t *testing.T) {
	n := newNS(t)
	n.veth(t, "eth0", "p-eth0", "198.18.0.2/24", "fd00:198:18::2/64")
	h := NetlinkHost{Handle: n.handle}
	for _, tc := range []struct {
		name, setting, stored string
		v6                    bool
		want, source          string
	}{
		{name: "none", setting: "none", source: "none"},
		{name: "v6 unset is none", v6: true, source: "none"},
		{name: "unset autodetects", want: "198.18.0.2/24", source: "first-found"},
		{name: "autodetect ignores stored", setting: "autodetect", stored: "198.18.7.7/24", want: "198.18.0.2/24", source: "first-found"},
		{name: "unset keeps stored", stored: "198.18.7.7/24", want: "198.18.7.7/24", source: "stored"},
		{name: "stored /32 corrected from interface", stored: "198.18.0.2/32", want: "198.18.0.2/24", source: "stored"},
		{name: "address without prefix takes interface's", setting: "198.18.0.2", want: "198.18.0.2/24", source: "configured"},
		{name: "v6 without prefix takes interface's", setting: "fd00:198:18::2", v6: true, want: "fd00:198:18::2/64", source: "configured"},
		{name: "explicit prefix kept", setting: "198.18.0.2/16", want: "198.18.0.2/16", source: "configured"},
		{name: "address on no interface kept", setting: "198.18.44.4", want: "198.18.44.4/32", source: "configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ResolveAddress(context.Background(), h, tc.setting, "", tc.v6, tc.stored)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if a.Prefix.IsValid() {
				got = a.Prefix.String()
			}
			if got != tc.want || a.Source != tc.source {
				t.Errorf("ResolveAddress(%q, stored %q) = %q (%s), want %q (%s)", tc.setting, tc.stored, got, a.Source, tc.want, tc.source)
			}
		})
	}
	if _, err := ResolveAddress(context.Background(), h, "", "interface=nothing", false, ""); err == nil ||
		!strings.Contains(err.Error(), "autodetecting IP address: interface=nothing") {
		t.Errorf("autodetection failure: err = %v", err)
	}
}
