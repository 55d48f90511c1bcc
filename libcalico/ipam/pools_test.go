package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

func testPool(t *testing.T, name, cidr string, mod func(*v3.IPPoolSpec)) pool {
	t.Helper()
	ip := &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: name}, Spec: v3.IPPoolSpec{CIDR: cidr}}
	if mod != nil {
		mod(&ip.Spec)
	}
	p, err := parsePool(ip)
	if err != nil {
		t.Fatalf("pool %s: %v", name, err)
	}
	return p
}

func TestParsePoolDefaultsAndErrors(t *testing.T) {
	if p := testPool(t, "v4", "10.0.0.0/16", nil); p.blockBits != 26 {
		t.Errorf("IPv4 default block size %d, want 26", p.blockBits)
	}
	if p := testPool(t, "v6", "fd00::/64", nil); p.blockBits != 122 {
		t.Errorf("IPv6 default block size %d, want 122", p.blockBits)
	}
	bad := []struct {
		name string
		spec v3.IPPoolSpec
		want string
	}{
		{"badcidr", v3.IPPoolSpec{CIDR: "10.0.0.0/33"}, `ippool "badcidr": spec.cidr "10.0.0.0/33"`},
		{"smallpool", v3.IPPoolSpec{CIDR: "10.0.0.0/28", BlockSize: 26}, `ippool "smallpool": spec.blockSize 26 does not fit`},
		{"badsel", v3.IPPoolSpec{CIDR: "10.0.0.0/16", NodeSelector: "a =="}, `ippool "badsel": spec.nodeSelector`},
		{"badnssel", v3.IPPoolSpec{CIDR: "10.0.0.0/16", NamespaceSelector: "a =="}, `ippool "badnssel": spec.namespaceSelector`},
	}
	for _, tc := range bad {
		_, err := parsePool(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: tc.name}, Spec: tc.spec})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pool %s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestChoosePools(t *testing.T) {
	manual := v3.AssignmentManual
	all := []pool{
		testPool(t, "a", "10.0.0.0/16", nil),
		testPool(t, "disabled", "10.1.0.0/16", func(s *v3.IPPoolSpec) { s.Disabled = true }),
		testPool(t, "rack1", "10.2.0.0/16", func(s *v3.IPPoolSpec) { s.NodeSelector = "rack == 'r1'" }),
		testPool(t, "tunnel", "10.3.0.0/16", func(s *v3.IPPoolSpec) { s.AllowedUses = []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseTunnel} }),
		testPool(t, "manual", "10.4.0.0/16", func(s *v3.IPPoolSpec) { s.AssignmentMode = &manual }),
		testPool(t, "v6", "fd00::/64", nil),
		testPool(t, "team", "10.5.0.0/16", func(s *v3.IPPoolSpec) { s.NamespaceSelector = "team == 'blue'" }),
	}
	tests := []struct {
		name      string
		version   int
		requested []string
		labels    map[string]string
		nsLabels  map[string]string
		intent    Intent
		want      []string
		wantErr   error
	}{
		{name: "workload, no labels", version: 4, intent: IntentWorkload, want: []string{"a"}},
		{name: "selector matches", version: 4, labels: map[string]string{"rack": "r1"}, intent: IntentWorkload, want: []string{"a", "rack1"}},
		{name: "tunnel intent", version: 4, intent: IntentTunnel, want: []string{"a", "tunnel"}},
		{name: "ipv6", version: 6, intent: IntentWorkload, want: []string{"v6"}},
		{name: "namespace selector matches", version: 4, nsLabels: map[string]string{"team": "blue"}, intent: IntentWorkload, want: []string{"a", "team"}},
		{name: "namespace selector does not match", version: 4, nsLabels: map[string]string{"team": "red"}, intent: IntentWorkload, want: []string{"a"}},
		{name: "requested ignores namespace selector", version: 4, requested: []string{"team"}, intent: IntentWorkload, want: []string{"team"}},
		{name: "requested by name ignores selector", version: 4, requested: []string{"rack1"}, intent: IntentWorkload, want: []string{"rack1"}},
		{name: "requested by CIDR", version: 4, requested: []string{"10.4.0.0/16"}, intent: IntentWorkload, want: []string{"manual"}},
		{name: "requested disabled", version: 4, requested: []string{"disabled"}, intent: IntentWorkload, wantErr: ErrPoolNotUsable},
		{name: "requested missing", version: 4, requested: []string{"nope"}, intent: IntentWorkload, wantErr: ErrPoolNotUsable},
		{name: "requested wrong family", version: 6, requested: []string{"a"}, intent: IntentWorkload, wantErr: ErrPoolNotUsable},
		{name: "requested wrong use", version: 4, requested: []string{"tunnel"}, intent: IntentWorkload, wantErr: ErrNoPools},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choosePools(all, tc.version, tc.requested, tc.labels, tc.nsLabels, tc.intent)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.name)
			}
			if len(names) != len(tc.want) {
				t.Fatalf("pools %v, want %v", names, tc.want)
			}
			for i := range names {
				if names[i] != tc.want[i] {
					t.Fatalf("pools %v, want %v", names, tc.want)
				}
			}
		})
	}
}

func TestCandidateBlocksCoverPoolOnce(t *testing.T) {
	p := testPool(t, "p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	for _, host := range []string{"node-a", "node-b", "x"} {
		seen := map[netip.Prefix]bool{}
		p.candidateBlocks(host, func(c netip.Prefix) bool {
			if seen[c] || !p.cidr.Contains(c.Addr()) || c.Bits() != 28 || c != c.Masked() {
				t.Errorf("host %s: bad or repeated candidate %s", host, c)
			}
			seen[c] = true
			return true
		})
		if len(seen) != 16 {
			t.Errorf("host %s: %d candidates, want 16", host, len(seen))
		}
	}
	big := testPool(t, "big6", "fd00::/48", nil)
	n := 0
	big.candidateBlocks("node-a", func(c netip.Prefix) bool {
		if !big.cidr.Contains(c.Addr()) || c.Bits() != 122 {
			t.Errorf("candidate %s outside %s", c, big.cidr)
		}
		n++
		return n < 3
	})
}

func TestReservations(t *testing.T) {
	var bad []error
	onBad := func(_ *v3.IPReservation, err error) { bad = append(bad, err) }
	rs := parseReservations([]*v3.IPReservation{{
		ObjectMeta: v3.ObjectMeta{Name: "r"},
		Spec:       v3.IPReservationSpec{ReservedCIDRs: []string{"10.0.0.0/28", "10.0.1.7", "fd00::1"}},
	}}, onBad)
	if len(bad) != 0 {
		t.Fatal(bad)
	}
	for ip, want := range map[string]bool{"10.0.0.15": true, "10.0.0.16": false, "10.0.1.7": true, "fd00::1": true, "fd00::2": false} {
		if got := rs.contains(netip.MustParseAddr(ip)); got != want {
			t.Errorf("reserved(%s) = %t, want %t", ip, got, want)
		}
	}
	if !rs.covers(netip.MustParsePrefix("10.0.0.0/29")) || rs.covers(netip.MustParsePrefix("10.0.0.0/27")) {
		t.Errorf("covers is wrong")
	}
	rs = parseReservations([]*v3.IPReservation{{ObjectMeta: v3.ObjectMeta{Name: "bad"}, Spec: v3.IPReservationSpec{ReservedCIDRs: []string{"nope", "10.0.2.0/24"}}}}, onBad)
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), `ipreservation "bad": spec.reservedCIDRs "nope"`) {
		t.Errorf("bad reservation entry reported as %v", bad)
	}
	if !rs.contains(netip.MustParseAddr("10.0.2.9")) {
		t.Errorf("a bad entry dropped the reservation's good ones")
	}
}
