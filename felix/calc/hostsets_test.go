package calc

import (
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func hsNode(name, a4, a6, t4, t6 string) *v3.Node {
	return &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: name},
		Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: a4, IPv6Address: a6}, IPv4VXLANTunnelAddr: t4, IPv6VXLANTunnelAddr: t6}}
}

func hsPool(name, cidr string, vxlan v3.EncapMode) *v3.IPPool {
	return &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr, VXLANMode: vxlan}}
}

// TestHostSets checks all-hosts-net and all-vxlan-net through node and
// configuration changes (a shared address is counted, not dropped with
// the first node holding it) and VXLAN4/VXLAN6 from the pools and
// vxlanEnabled, in every order of the same inputs.
func TestHostSets(t *testing.T) {
	cfg := &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.FelixConfigurationSpec{ExternalNodesCIDRList: &[]string{"203.0.113.0/24", "198.18.0.2", "bad"}}}
	inputs := []v3.Resource{
		hsNode("a", "198.18.0.1/24", "fd00::1/64", "10.0.0.1", ""),
		hsNode("b", "198.18.0.2/24", "", "", ""),
		hsNode("c", "198.18.0.3/24", "fd00::3/64", "10.0.1.1", "fd01::1"),
		hsPool("v4", "10.0.0.0/16", v3.EncapCrossSubnet),
		hsPool("v6", "fd01::/48", v3.EncapNever),
		cfg,
	}
	const wantHosts = "198.18.0.1 198.18.0.2 198.18.0.3 203.0.113.0/24 fd00::1 fd00::3"
	const wantVXLAN = "198.18.0.1 198.18.0.2 198.18.0.3 203.0.113.0/24 fd00::3"
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 5, 0, 4, 1, 3}} {
		r := newRecorder()
		g := NewGraph("a", r)
		for _, i := range order {
			g.OnUpdate(Update{Key: datastore.KeyOf(inputs[i]), Value: inputs[i]})
			g.Flush()
		}
		if got := joined(t, r, IPSetAllHosts); got != wantHosts {
			t.Errorf("order %v: all-hosts-net %q, want %q", order, got, wantHosts)
		}
		if got := joined(t, r, IPSetAllVXLAN); got != wantVXLAN {
			t.Errorf("order %v: all-vxlan-net %q, want %q", order, got, wantVXLAN)
		}
		if !r.config.VXLAN4 || r.config.VXLAN6 {
			t.Errorf("order %v: VXLAN4 %v VXLAN6 %v, want true false", order, r.config.VXLAN4, r.config.VXLAN6)
		}
		if len(r.errs) > 0 {
			t.Fatalf("order %v: %v", order, r.errs)
		}
	}

	r := newRecorder()
	g := NewGraph("a", r)
	for _, in := range inputs {
		g.OnUpdate(Update{Key: datastore.KeyOf(in), Value: in})
	}
	g.Flush()
	steps := []struct {
		what         string
		update       Update
		hosts, vxlan string
		v4, v6       bool
	}{
		// b's address is also in externalNodesList: still there.
		{"node b deleted", Update{Key: datastore.KeyOf(inputs[1])},
			"198.18.0.1 198.18.0.2 198.18.0.3 203.0.113.0/24 fd00::1 fd00::3", "198.18.0.1 198.18.0.2 198.18.0.3 203.0.113.0/24 fd00::3", true, false},
		{"node c loses its tunnels and moves", Update{Key: datastore.KeyOf(inputs[2]), Value: hsNode("c", "198.18.0.9/24", "", "", "")},
			"198.18.0.1 198.18.0.2 198.18.0.9 203.0.113.0/24 fd00::1", "198.18.0.1 198.18.0.2 203.0.113.0/24", true, false},
		{"externalNodesList cleared", Update{Key: datastore.KeyOf(cfg), Value: &v3.FelixConfiguration{TypeMeta: cfg.TypeMeta, ObjectMeta: cfg.ObjectMeta}},
			"198.18.0.1 198.18.0.9 fd00::1", "198.18.0.1", true, false},
		{"v6 pool asks for VXLAN", Update{Key: datastore.KeyOf(inputs[4]), Value: hsPool("v6", "fd01::/48", v3.EncapAlways)},
			"198.18.0.1 198.18.0.9 fd00::1", "198.18.0.1", true, true},
		{"v4 pool deleted", Update{Key: datastore.KeyOf(inputs[3])},
			"198.18.0.1 198.18.0.9 fd00::1", "198.18.0.1", false, true},
		{"vxlanEnabled false", Update{Key: datastore.KeyOf(cfg), Value: &v3.FelixConfiguration{TypeMeta: cfg.TypeMeta, ObjectMeta: cfg.ObjectMeta,
			Spec: v3.FelixConfigurationSpec{VXLANEnabled: new(false)}}},
			"198.18.0.1 198.18.0.9 fd00::1", "198.18.0.1", false, false},
	}
	for _, s := range steps {
		g.OnUpdate(s.update)
		g.Flush()
		if got := joined(t, r, IPSetAllHosts); got != s.hosts {
			t.Errorf("%s: all-hosts-net %q, want %q", s.what, got, s.hosts)
		}
		if got := joined(t, r, IPSetAllVXLAN); got != s.vxlan {
			t.Errorf("%s: all-vxlan-net %q, want %q", s.what, got, s.vxlan)
		}
		if r.config.VXLAN4 != s.v4 || r.config.VXLAN6 != s.v6 {
			t.Errorf("%s: VXLAN4 %v VXLAN6 %v, want %v %v", s.what, r.config.VXLAN4, r.config.VXLAN6, s.v4, s.v6)
		}
	}
	if len(r.errs) > 0 {
		t.Fatal(r.errs)
	}
}

func joined(t *testing.T, r *recorder, id string) string { return strings.Join(members(t, r, id), " ") }
