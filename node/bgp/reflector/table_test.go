package reflector

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// announce is what the speaker sends a client: pfxs originated by origin
// (next hop nh), with LLGR_STALE when stale.
func announce(t *testing.T, origin, nh string, stale bool, pfxs ...string) (update, []byte) {
	t.Helper()
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), bgp.NewPathAttributeAsPath(nil),
		bgp.NewPathAttributeNextHop(nh), bgp.NewPathAttributeLocalPref(100), bgp.NewPathAttributeOriginatorId(origin),
		bgp.NewPathAttributeClusterList([]string{"224.0.0.1"})}
	if stale {
		attrs = append(attrs, bgp.NewPathAttributeCommunities([]uint32{uint32(bgp.COMMUNITY_LLGR_STALE)}))
	}
	var ps []netip.Prefix
	for _, p := range pfxs {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	raw := encode(bgp.RF_IPv4_UC, nil, attrs, nil, nil, ps, 0)[0]
	return parsed(t, raw), raw
}

func withdraw(t *testing.T, pfxs ...string) (update, []byte) {
	t.Helper()
	var ps []netip.Prefix
	for _, p := range pfxs {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	raw := encode(bgp.RF_IPv4_UC, ps, nil, nil, nil, nil, 0)[0]
	return parsed(t, raw), raw
}

func parsed(t *testing.T, raw []byte) update {
	t.Helper()
	m, err := bgp.ParseBGPMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	ups := parseUpdate(m.Body.(*bgp.BGPUpdate))
	if len(ups) != 1 {
		t.Fatalf("%d updates in one message", len(ups))
	}
	return ups[0]
}

// prefixes decodes what a client is sent: announced and withdrawn.
func prefixes(t *testing.T, msgs [][]byte) (ann, wd []string) {
	t.Helper()
	for _, b := range msgs {
		u := parsed(t, b)
		for _, p := range u.announced {
			ann = append(ann, p.String())
		}
		for _, p := range u.withdrawn {
			wd = append(wd, p.String())
		}
	}
	slices.Sort(ann)
	slices.Sort(wd)
	return ann, wd
}

var (
	idA = netip.MustParseAddr("198.18.0.1")
	idB = netip.MustParseAddr("198.18.0.2")
	idC = netip.MustParseAddr("198.18.0.3")
	v4  = map[bgp.RouteFamily]bool{bgp.RF_IPv4_UC: true}
)

// TestTableFanOut: each message of the speaker is logged once, as
// received, for every client but its route's originator; the originator
// gets instead the withdrawal of what it had from another; a repeat of
// the current routes (the speaker's soft reset) logs nothing; a client
// joining later is sent the current routes but its own.
func TestTableFanOut(t *testing.T) {
	tab := newTable()
	u, raw := announce(t, idA.String(), "198.18.0.1", false, "10.244.1.0/26", "10.96.0.0/12")
	tab.apply(u, raw, true)
	if len(tab.log) != 1 || !slices.Equal(tab.log[0].pick(idC, false)[0], raw) {
		t.Fatalf("the speaker's message should be logged once, as received: %+v", tab.log)
	}
	if got := tab.log[0].pick(idA, false); got != nil {
		t.Errorf("the originator was sent its own routes: %x", got)
	}
	// B becomes the best path of the shared prefix: B gets it withdrawn
	// (it had A's), the others get B's.
	u, raw = announce(t, idB.String(), "198.18.0.2", false, "10.96.0.0/12")
	tab.apply(u, raw, true)
	e := tab.log[1]
	if ann, wd := prefixes(t, e.pick(idB, false)); len(ann) != 0 || !slices.Equal(wd, []string{"10.96.0.0/12"}) {
		t.Errorf("B should lose A's 10.96.0.0/12: announced %v, withdrawn %v", ann, wd)
	}
	if ann, _ := prefixes(t, e.pick(idA, false)); !slices.Equal(ann, []string{"10.96.0.0/12"}) {
		t.Errorf("A should get B's 10.96.0.0/12: %v", ann)
	}
	// The speaker sends the same again: nothing new.
	tab.apply(u, raw, true)
	if len(tab.log) != 2 {
		t.Errorf("a repeat of the current route was logged: %d entries", len(tab.log))
	}
	// Joining clients.
	for _, c := range []struct {
		id   netip.Addr
		want []string
	}{
		{idA, []string{"10.96.0.0/12"}},
		{idB, []string{"10.244.1.0/26"}},
		{idC, []string{"10.244.1.0/26", "10.96.0.0/12"}},
	} {
		if ann, _ := prefixes(t, tab.dump(v4, c.id, false)); !slices.Equal(ann, c.want) {
			t.Errorf("a client %s joining now is sent %v, want %v", c.id, ann, c.want)
		}
	}
	// A withdrawal goes to everyone.
	u, raw = withdraw(t, "10.244.1.0/26")
	tab.apply(u, raw, true)
	if _, wd := prefixes(t, tab.log[2].pick(idA, false)); !slices.Equal(wd, []string{"10.244.1.0/26"}) {
		t.Errorf("withdrawal: %v", wd)
	}
	if ann, _ := prefixes(t, tab.dump(v4, idC, false)); !slices.Equal(ann, []string{"10.96.0.0/12"}) {
		t.Errorf("after the withdrawal a joining client is sent %v", ann)
	}
	tab.trim(2)
	if tab.base != 2 || len(tab.log) != 1 {
		t.Errorf("trim: base %d, %d entries", tab.base, len(tab.log))
	}
}

// TestTableLLGR: a client without long-lived graceful restart gets an
// LLGR_STALE route withdrawn instead, and is not sent it when joining.
func TestTableLLGR(t *testing.T) {
	tab := newTable()
	u, raw := announce(t, idA.String(), "198.18.0.1", true, "10.244.1.0/26")
	tab.apply(u, raw, true)
	if ann, wd := prefixes(t, tab.log[0].pick(idC, false)); len(ann) != 0 || !slices.Equal(wd, []string{"10.244.1.0/26"}) {
		t.Errorf("a client without LLGR: announced %v, withdrawn %v", ann, wd)
	}
	if ann, _ := prefixes(t, tab.log[0].pick(idC, true)); !slices.Equal(ann, []string{"10.244.1.0/26"}) {
		t.Errorf("a client with LLGR: %v", ann)
	}
	if ann, _ := prefixes(t, tab.dump(v4, idC, false)); len(ann) != 0 {
		t.Errorf("a joining client without LLGR is sent %v", ann)
	}
}

// TestTableSpeakerRestart: after the speaker's session comes back, what
// it did not send again by its End-of-RIB is withdrawn.
func TestTableSpeakerRestart(t *testing.T) {
	tab := newTable()
	tab.gen = 1
	for _, p := range []string{"10.244.1.0/26", "10.244.2.0/26"} {
		u, raw := announce(t, idA.String(), "198.18.0.1", false, p)
		tab.apply(u, raw, true)
	}
	tab.gen = 2
	clear(tab.eor)
	u, raw := announce(t, idA.String(), "198.18.0.1", false, "10.244.1.0/26")
	tab.apply(u, raw, true)
	if len(tab.log) != 2 {
		t.Errorf("the route sent again was logged again: %d entries", len(tab.log))
	}
	tab.apply(update{family: bgp.RF_IPv4_UC, eor: true}, nil, true)
	if _, wd := prefixes(t, tab.log[2].pick(idC, false)); !slices.Equal(wd, []string{"10.244.2.0/26"}) {
		t.Errorf("at End-of-RIB: withdrawn %v, want the route not sent again", wd)
	}
	if !tab.log[3].eor || !tab.eor[bgp.RF_IPv4_UC] {
		t.Errorf("End-of-RIB not recorded")
	}
}

// TestEncodePathID: what goes upstream carries the client's path
// identifier (ADD-PATH), so the speaker keeps one path per client.
func TestEncodePathID(t *testing.T) {
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), bgp.NewPathAttributeNextHop("198.18.0.1")}
	for _, p := range []string{"10.244.1.0/26", "fd00:244::/122"} {
		pfx := netip.MustParsePrefix(p)
		fam := familyOf(pfx.Addr())
		for _, raw := range [][]byte{
			encode(fam, nil, attrs, []byte(netip.MustParseAddr("fd00::1").AsSlice()), nil, []netip.Prefix{pfx}, 7)[0],
			encode(fam, []netip.Prefix{pfx}, nil, nil, nil, nil, 7)[0],
		} {
			m, err := bgp.ParseBGPMessage(raw, &bgp.MarshallingOption{AddPath: map[bgp.RouteFamily]bgp.BGPAddPathMode{fam: bgp.BGP_ADD_PATH_RECEIVE}})
			if err != nil {
				t.Fatal(err)
			}
			u := m.Body.(*bgp.BGPUpdate)
			var ps []bgp.AddrPrefixInterface
			for _, n := range u.NLRI {
				ps = append(ps, n)
			}
			for _, n := range u.WithdrawnRoutes {
				ps = append(ps, n)
			}
			for _, a := range u.PathAttributes {
				switch a := a.(type) {
				case *bgp.PathAttributeMpReachNLRI:
					ps = append(ps, a.Value...)
				case *bgp.PathAttributeMpUnreachNLRI:
					ps = append(ps, a.Value...)
				}
			}
			if len(ps) != 1 || ps[0].PathIdentifier() != 7 || ps[0].String() != p {
				t.Errorf("%s: got %v, want %s with path identifier 7", p, ps, p)
			}
		}
	}
}
