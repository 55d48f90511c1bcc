package dataplane

import (
	"net/netip"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

func TestIfaceExclusion(t *testing.T) {
	for _, tc := range []struct {
		entries []string
		iface   string
		want    bool
	}{
		{[]string{"kube-ipvs0"}, "kube-ipvs0", true},
		{[]string{"kube-ipvs0"}, "kube-ipvs01", false},
		{[]string{"eth9", "/^kube-.*/"}, "kube-bridge", true},
		{[]string{"eth9", "/^kube-.*/"}, "eth9", true},
		{[]string{"eth9", "/^kube-.*/"}, "eth0", false},
		// An unanchored expression matches anywhere in the name.
		{[]string{"/ipvs/"}, "kube-ipvs0", true},
		// A name with one slash is a name, not an expression.
		{[]string{"/"}, "kube-ipvs0", false},
		{[]string{"/[/"}, "[", false},
		{nil, "kube-ipvs0", false},
	} {
		if got := parseIfaceExclusion(tc.entries).excludes(tc.iface); got != tc.want {
			t.Errorf("interfaceExclude %q excludes %s = %v, want %v", tc.entries, tc.iface, got, tc.want)
		}
	}
	if inv := parseIfaceExclusion([]string{"/[/"}).invalid; len(inv) != 1 {
		t.Errorf("invalid entries of /[/: %q", inv)
	}
}

// TestHostIfacesExclude resolves host endpoints against the interfaces of
// a real namespace: an excluded interface is never chosen for an
// expectedIPs endpoint, and an endpoint naming it is left out.
func TestHostIfacesExclude(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "hostifaces")
	for _, l := range []struct{ name, peer, addr string }{
		{"kube-ipvs0", "kipvs-peer", "198.18.7.1/32"},
		{"eth-a", "eth-a-peer", "198.18.7.2/24"},
	} {
		ns.MustRun(t, "ip", "link", "add", l.name, "type", "veth", "peer", "name", l.peer)
		ns.MustRun(t, "ip", "addr", "add", l.addr, "dev", l.name)
	}
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	hi, err := newHostIfaces(run)
	if err != nil {
		t.Fatal(err)
	}
	defer hi.close()

	hep := func(name, iface string, ips ...string) *calc.Endpoint {
		ep := &calc.Endpoint{ID: calc.EndpointID{Kind: calc.HostEndpoint, Name: name}, InterfaceName: iface}
		for _, ip := range ips {
			ep.IPv4Nets = append(ep.IPv4Nets, netip.PrefixFrom(netip.MustParseAddr(ip), 32))
		}
		return ep
	}
	eps := map[calc.EndpointID]*calc.Endpoint{}
	for _, ep := range []*calc.Endpoint{
		hep("by-ipvs-ip", "", "198.18.7.1"),
		hep("by-eth-ip", "", "198.18.7.2"),
		hep("named-ipvs", "kube-ipvs0"),
		hep("named-eth", "eth-a"),
		hep("all", "*"),
	} {
		eps[ep.ID] = ep
	}
	// resolved is endpoint name → interface ("" when left out).
	resolved := func() map[string]string {
		t.Helper()
		out, err := hi.endpoints(eps)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for id := range eps {
			if ep := out[id]; ep != nil {
				got[id.Name] = ep.InterfaceName
			} else {
				got[id.Name] = ""
			}
		}
		return got
	}
	check := func(what string, want map[string]string) {
		t.Helper()
		got := resolved()
		for name, iface := range want {
			if got[name] != iface {
				t.Errorf("%s: endpoint %s on %q, want %q", what, name, got[name], iface)
			}
		}
	}
	cfg := func(exclude string) *calc.Config {
		return calc.MergeConfig(&v3.FelixConfigurationSpec{InterfaceExclude: exclude}, nil)
	}

	// Nothing excluded: every endpoint finds its interface (the exclusion
	// below is what leaves some out).
	hi.configure(cfg("eth-nothing"), nil)
	check("nothing excluded", map[string]string{
		"by-ipvs-ip": "kube-ipvs0", "by-eth-ip": "eth-a", "named-ipvs": "kube-ipvs0", "named-eth": "eth-a", "all": "*",
	})
	// Calico's default excludes kube-ipvs0.
	hi.configure(calc.MergeConfig(nil, nil), nil)
	want := map[string]string{"by-ipvs-ip": "", "by-eth-ip": "eth-a", "named-ipvs": "", "named-eth": "eth-a", "all": "*"}
	check("default kube-ipvs0", want)
	// A regular expression.
	hi.configure(cfg("eth9,/^kube-/"), nil)
	check("/^kube-/", want)
	hi.configure(cfg("/^eth-/"), nil)
	check("/^eth-/", map[string]string{"by-ipvs-ip": "kube-ipvs0", "by-eth-ip": "", "named-ipvs": "kube-ipvs0", "named-eth": ""})
	// The input map is never changed.
	if eps[calc.EndpointID{Kind: calc.HostEndpoint, Name: "by-eth-ip"}].InterfaceName != "" || len(eps) != 5 {
		t.Errorf("endpoints changed the map it was given")
	}
}
