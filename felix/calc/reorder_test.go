package calc

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// universe generates a cluster whose resource names depend only on their
// index, so two universes of different seeds are two versions of the same
// keys.
func universe(seed uint64) []v3.Resource {
	r := rand.New(rand.NewPCG(seed, 7))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	sel := func() string {
		return pick("app == 'a'", "app == 'b'", "has(tier)", "tier == 'x' || app == 'c'", "all()", "!has(app)", "",
			// Keys an endpoint gets from its namespace, profile or account.
			"pcns.team == 'red'", "zone == 'z1' && app != 'b'", "projectcalico.org/namespace == 'ns1'", "has(projectcalico.org/serviceaccount)")
	}
	order := func() *float64 {
		if r.IntN(3) == 0 {
			return nil
		}
		return ord(float64(r.IntN(4)))
	}
	labels := func() map[string]string {
		m := map[string]string{"app": pick("a", "b", "c")}
		if r.IntN(2) == 0 {
			m["tier"] = pick("x", "y")
		}
		return m
	}
	tcp := numorstring.ProtocolFromString("TCP")
	udp := numorstring.ProtocolFromString("UDP")
	entity := func() v3.EntityRule {
		var e v3.EntityRule
		switch r.IntN(6) {
		case 0:
			e.Selector = sel()
		case 1:
			e.NamespaceSelector = pick("team == 'red'", "global()", "all()")
			e.Selector = sel()
		case 2:
			e.NotSelector = pick("app == 'a'", "has(tier)")
		case 3:
			e.ServiceAccounts = &v3.ServiceAccountMatch{Names: []string{pick("sa1", "sa2")}}
		case 4:
			e.Nets = []string{pick("10.0.0.0/8", "192.0.2.1", "fd00::/64")}
		}
		if r.IntN(3) == 0 {
			e.Ports = []numorstring.Port{numorstring.NamedPort(pick("http", "dns")), numorstring.SinglePort(80)}
		}
		return e
	}
	rules := func() []v3.Rule {
		var out []v3.Rule
		for range r.IntN(3) {
			p := tcp
			if r.IntN(2) == 0 {
				p = udp
			}
			out = append(out, v3.Rule{Action: v3.Action(pick("Allow", "Deny", "Pass", "Log")), Protocol: &p, Source: entity(), Destination: entity()})
		}
		return out
	}
	var out []v3.Resource
	for i := range 3 {
		ns := fmt.Sprintf("ns%d", i)
		p := nsProfile(ns, map[string]string{"team": pick("red", "blue")})
		p.Spec.Ingress = rules()
		p.Spec.LabelsToApply = map[string]string{"zone": pick("z1", "z2")}
		out = append(out, p)
	}
	for i := range 12 {
		ns := fmt.Sprintf("ns%d", r.IntN(3))
		if r.IntN(2) == 0 {
			ns = fmt.Sprintf("ns%d", i%3)
		}
		w := wep(fmt.Sprintf("ns%d", i%3), fmt.Sprintf("w%d", i), pick(testNode, "other"),
			fmt.Sprintf("10.%d.0.%d", r.IntN(2), i), labels(), func(w *v3.WorkloadEndpoint) {
				w.Spec.ServiceAccountName = pick("sa1", "sa2", "")
				w.Spec.Ports = []v3.WorkloadEndpointPort{{Name: pick("http", "dns"), Protocol: tcp, Port: uint16(8000 + r.IntN(3))}}
			})
		_ = ns
		out = append(out, w)
	}
	for i := range 2 {
		out = append(out, &v3.HostEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindHostEndpoint}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("h%d", i), Labels: labels()},
			Spec: v3.HostEndpointSpec{Node: pick(testNode, "other"), InterfaceName: "eth0", ExpectedIPs: []string{fmt.Sprintf("198.18.0.%d", r.IntN(3))}}})
		out = append(out, &v3.NetworkSet{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkSet}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("n%d", i), Namespace: "ns1", Labels: labels()},
			Spec: v3.NetworkSetSpec{Nets: []string{fmt.Sprintf("192.0.2.%d/32", r.IntN(4))}}})
		out = append(out, &v3.GlobalNetworkSet{TypeMeta: v3.TypeMeta{Kind: v3.KindGlobalNetworkSet}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("g%d", i), Labels: labels()},
			Spec: v3.GlobalNetworkSetSpec{Nets: []string{fmt.Sprintf("203.0.113.%d/32", r.IntN(4))}}})
		action := v3.Action(pick("Deny", "Pass"))
		out = append(out, &v3.Tier{TypeMeta: v3.TypeMeta{Kind: v3.KindTier}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("t%d", i)},
			Spec: v3.TierSpec{Order: order(), DefaultAction: &action}})
		out = append(out, &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("pool%d", i)},
			Spec: v3.IPPoolSpec{CIDR: fmt.Sprintf("10.%d.0.0/16", r.IntN(3)), NATOutgoing: r.IntN(2) == 0}})
	}
	for i := range 8 {
		tier := pick("default", "t0", "t1")
		if i%2 == 0 {
			p := np(fmt.Sprintf("ns%d", i%3), fmt.Sprintf("p%d", i), sel(), order(), rules()...)
			p.Spec.Egress, p.Spec.Tier = rules(), tier
			out = append(out, p)
			continue
		}
		out = append(out, gnp(fmt.Sprintf("g%d", i), sel(), order(), func(s *v3.GlobalNetworkPolicySpec) {
			s.Ingress, s.Egress, s.Tier = rules(), rules(), tier
			if r.IntN(3) == 0 {
				s.ApplyOnForward = true
				s.PreDNAT = r.IntN(2) == 0
			}
		}))
	}
	out = append(out, &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.FelixConfigurationSpec{DefaultEndpointToHostAction: pick("Drop", "Return", "Accept")}})
	// Local BGP peering: which workloads are peers depends on BGPPeers,
	// this node's labels and BGPConfiguration default.
	out = append(out, &v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration}, ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.BGPConfigurationSpec{LocalWorkloadPeeringIPV4: pick("169.254.0.179", ""), LocalWorkloadPeeringIPV6: pick("fd12::1", "")}})
	out = append(out, &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode}, ObjectMeta: v3.ObjectMeta{Name: testNode, Labels: map[string]string{"rack": pick("r1", "r2")}}})
	for i := range 2 {
		out = append(out, &v3.BGPPeer{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPPeer}, ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("local%d", i)},
			Spec: v3.BGPPeerSpec{LocalWorkloadSelector: sel(), NodeSelector: pick("", "rack == 'r1'"), ASNumber: 65401}})
	}
	return out
}

type state struct {
	Config    *Config
	Sets      map[string]map[string]bool
	Types     map[string]IPSetType
	Policies  map[PolicyID]*Policy
	Profiles  map[string]*Profile
	Endpoints map[EndpointID]*Endpoint
	Routes    any
}

func stateOf(r *recorder) state {
	return state{r.config, r.sets, r.setTypes, r.policies, r.profiles, r.endpoints, r.routes}
}

// TestReorderProperty feeds the same final state in many orders, split
// into many flushes, with stale versions, deletions and duplicates on the
// way: the accumulated dataplane state must not change.
func TestReorderProperty(t *testing.T) {
	for seed := range uint64(40) {
		final := universe(seed)
		ref := run(t, updates(final)...)
		if len(ref.endpoints) == 0 || len(ref.policies) == 0 {
			t.Logf("seed %d: no active policy", seed)
		}
		for variant := range uint64(10) {
			r := rand.New(rand.NewPCG(seed, variant))
			stale := universe(seed + 1000 + variant)
			extra := universe(seed + 5000)[:r.IntN(10)]
			for _, x := range extra {
				x.GetObjectMeta().Name += "-extra"
			}
			var seq []Update
			for _, u := range updates(stale) {
				if r.IntN(2) == 0 {
					seq = append(seq, u)
				}
			}
			seq = append(seq, updates(extra)...)
			for _, u := range updates(final) {
				seq = append(seq, u)
				if r.IntN(5) == 0 {
					seq = append(seq, Update{Key: u.Key}, u) // delete and recreate
				}
				if r.IntN(5) == 0 {
					seq = append(seq, u) // duplicate
				}
			}
			// Shuffle, keeping each key's updates in order.
			seq = shuffleKeepingKeyOrder(r, seq)
			for _, x := range extra {
				seq = append(seq, Update{Key: datastore.KeyOf(x)})
			}
			rec := newRecorder()
			g := NewGraph(testNode, rec)
			for _, u := range seq {
				g.OnUpdate(u)
				if r.IntN(7) == 0 {
					g.Flush()
				}
			}
			g.OnInSync()
			g.Flush()
			checkSetIndex(t, g)
			if len(rec.errs) > 0 {
				t.Fatalf("seed %d variant %d: order violations:\n%s", seed, variant, strings.Join(rec.errs, "\n"))
			}
			if got, want := stateOf(rec), stateOf(ref); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d variant %d: state differs: %s", seed, variant, firstDiff(got, want))
			}
		}
	}
}

// checkSetIndex checks the label index against trying every set: each
// item is in exactly the active sets whose spec it matches.
func checkSetIndex(t *testing.T, g *Graph) {
	t.Helper()
	x := g.labels
	for key, it := range x.items {
		for id, s := range x.sets {
			if s.pending {
				continue
			}
			if want, got := s.spec.matches(it), slices.Contains(it.sets, s); got != want {
				t.Fatalf("item %s in set %s (%v): %v, want %v", key, id, s.spec.sel, got, want)
			}
		}
	}
}

func updates(rs []v3.Resource) []Update {
	out := make([]Update, len(rs))
	for i, r := range rs {
		out[i] = up(r)
	}
	return out
}

// shuffleKeepingKeyOrder interleaves the updates randomly while each key's
// own updates stay in their order (the datastore's guarantee).
func shuffleKeepingKeyOrder(r *rand.Rand, seq []Update) []Update {
	byKey := map[datastore.Key][]Update{}
	var keys []datastore.Key
	for _, u := range seq {
		if _, ok := byKey[u.Key]; !ok {
			keys = append(keys, u.Key)
		}
		byKey[u.Key] = append(byKey[u.Key], u)
	}
	out := make([]Update, 0, len(seq))
	for len(keys) > 0 {
		i := r.IntN(len(keys))
		k := keys[i]
		out = append(out, byKey[k][0])
		if byKey[k] = byKey[k][1:]; len(byKey[k]) == 0 {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	return out
}

// firstDiff names the first part of two states that differs.
func firstDiff(got, want state) string {
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		gf, wf := g.Field(i), w.Field(i)
		if reflect.DeepEqual(gf.Interface(), wf.Interface()) {
			continue
		}
		name := g.Type().Field(i).Name
		if gf.Kind() != reflect.Map {
			return fmt.Sprintf("%s: got %+v, want %+v", name, gf.Interface(), wf.Interface())
		}
		for _, k := range wf.MapKeys() {
			gv := gf.MapIndex(k)
			wv := wf.MapIndex(k)
			if !gv.IsValid() {
				return fmt.Sprintf("%s[%v] missing, want %+v", name, k, deref(wv))
			}
			if !reflect.DeepEqual(gv.Interface(), wv.Interface()) {
				return fmt.Sprintf("%s[%v]:\n got %+v\nwant %+v", name, k, deref(gv), deref(wv))
			}
		}
		for _, k := range gf.MapKeys() {
			if !wf.MapIndex(k).IsValid() {
				return fmt.Sprintf("%s[%v] unexpected: %+v", name, k, deref(gf.MapIndex(k)))
			}
		}
	}
	return "?"
}

func deref(v reflect.Value) any {
	if v.Kind() == reflect.Pointer {
		return v.Elem().Interface()
	}
	return v.Interface()
}
