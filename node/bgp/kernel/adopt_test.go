package kernel

import (
	"net/netip"
	"strings"
	"testing"
)

// TestAdopt: the routes Calico's BIRD leaves in the main table (protocol
// bird, 12: through a gateway, ECMP, a blackhole, IPv6, and one with a
// metric of its own) inside the IP pools become ours in place: same
// destination, same next hops, protocol 201, no copy left under protocol
// 12; a route through a device only, routes outside the pools (a default
// route BIRD learned from a router, another BIRD's route on the host) and
// another protocol's route stay as they are.
func TestAdopt(t *testing.T) {
	lab, ns, h := setup(t)
	for _, r := range [][]string{
		{"10.244.2.0/26", "via", "198.18.0.2", "proto", "bird"},
		{"10.244.3.0/26", "proto", "bird", "nexthop", "via", "198.18.0.2", "nexthop", "via", "198.18.0.3"},
		{"blackhole", "10.244.1.0/26", "proto", "bird"},
		{"10.244.4.0/26", "via", "198.18.0.4", "proto", "bird", "metric", "1024"},
		{"10.244.5.0/26", "dev", "eth0", "proto", "bird"},
		{"10.244.6.0/26", "via", "198.18.0.6", "proto", "static"},
		{"default", "via", "198.18.0.1", "proto", "bird", "metric", "50"},
		{"192.0.2.0/24", "via", "198.18.0.7", "proto", "bird"},
		{"10.0.0.0/8", "via", "198.18.0.8", "proto", "bird"},
	} {
		lab.Run(append([]string{"ip", "-n", ns, "route", "add"}, r...)...)
	}
	lab.Run("ip", "-n", ns, "-6", "route", "add", "fd00:244::/122", "via", "fd00:198::2", "proto", "bird")

	pools := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}
	n, err := h.Adopt(BirdProtocol, pools)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("took over %d routes, want 5", n)
	}
	ours := lab.Run("ip", "-n", ns, "route", "show", "proto", proto) + lab.Run("ip", "-n", ns, "-6", "route", "show", "proto", proto)
	for _, want := range []string{
		"10.244.2.0/26 via 198.18.0.2", "10.244.3.0/26", "nexthop via 198.18.0.2", "nexthop via 198.18.0.3",
		"blackhole 10.244.1.0/26", "10.244.4.0/26 via 198.18.0.4", "fd00:244::/122 via fd00:198::2",
	} {
		if !strings.Contains(ours, want) {
			t.Errorf("routes of ours lack %q:\n%s", want, ours)
		}
	}
	birds := lab.Run("ip", "-n", ns, "route", "show", "proto", "bird") + lab.Run("ip", "-n", ns, "-6", "route", "show", "proto", "bird")
	if want := "default via 198.18.0.1 dev eth0 metric 50 10.0.0.0/8 via 198.18.0.8 dev eth0 10.244.5.0/26 dev eth0 scope link 192.0.2.0/24 via 198.18.0.7 dev eth0"; strings.Join(strings.Fields(birds), " ") != want {
		t.Errorf("BIRD's routes left:\n%s\nwant the one through a device and those outside the pools:\n%s", birds, want)
	}
	if got := lab.Run("ip", "-n", ns, "route", "show", "proto", "static"); !strings.Contains(got, "10.244.6.0/26 via 198.18.0.6") {
		t.Errorf("a static route was touched: %q", got)
	}
	// Nothing left to take over.
	if n, err := h.Adopt(BirdProtocol, pools); n != 0 || err != nil {
		t.Errorf("second Adopt: %d, %v", n, err)
	}
}
