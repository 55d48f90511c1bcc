package calc

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/selector"
)

const testNode = "node-a"

func up(r v3.Resource) Update { return Update{Key: datastore.KeyOf(r), Value: r} }

func del(r v3.Resource) Update { return Update{Key: datastore.KeyOf(r)} }

func wep(ns, name, node, ip string, labels map[string]string, mods ...func(*v3.WorkloadEndpoint)) *v3.WorkloadEndpoint {
	w := &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: v3.WorkloadEndpointSpec{
			Node: node, IPNetworks: []string{ip + "/32"}, InterfaceName: "cali" + name,
			Profiles: []string{"kns." + ns},
		},
	}
	for _, m := range mods {
		m(w)
	}
	return w
}

func nsProfile(ns string, labels map[string]string) *v3.Profile {
	return &v3.Profile{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "kns." + ns, Labels: labels},
		Spec:       v3.ProfileSpec{Ingress: []v3.Rule{{Action: v3.Allow}}, Egress: []v3.Rule{{Action: v3.Allow}}},
	}
}

func np(ns, name, sel string, order *float64, ingress ...v3.Rule) *v3.NetworkPolicy {
	return &v3.NetworkPolicy{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v3.NetworkPolicySpec{Selector: sel, Order: order, Ingress: ingress},
	}
}

func gnp(name, sel string, order *float64, mods ...func(*v3.GlobalNetworkPolicySpec)) *v3.GlobalNetworkPolicy {
	p := &v3.GlobalNetworkPolicy{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindGlobalNetworkPolicy, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: name},
		Spec:       v3.GlobalNetworkPolicySpec{Selector: sel, Order: order},
	}
	for _, m := range mods {
		m(&p.Spec)
	}
	return p
}

func ord(f float64) *float64 { return &f }

func allowFrom(e v3.EntityRule) v3.Rule { return v3.Rule{Action: v3.Allow, Source: e} }

func run(t *testing.T, updates ...Update) *recorder {
	t.Helper()
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	g.OnUpdates(updates)
	g.OnInSync()
	g.Flush()
	if len(rec.errs) > 0 {
		t.Fatalf("dataplane order violations:\n%s", strings.Join(rec.errs, "\n"))
	}
	return rec
}

// setOf returns the members of the set a rule's first source set is.
func members(t *testing.T, rec *recorder, id string) []string {
	t.Helper()
	m, ok := rec.sets[id]
	if !ok {
		t.Fatalf("set %s was not sent; sets: %v", id, slices.Sorted(mapKeys(rec.sets)))
	}
	return slices.Sorted(mapKeys(m))
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func pid(ns, name string) PolicyID { return PolicyID{Tier: "default", Namespace: ns, Name: name} }

func wid(ns, name string) EndpointID {
	return EndpointID{Kind: WorkloadEndpoint, Namespace: ns, Name: name}
}

// TestSelectorSets checks which endpoints and network sets each kind of
// rule selector draws its members from.
func TestSelectorSets(t *testing.T) {
	base := []Update{
		up(nsProfile("a", map[string]string{"team": "red"})),
		up(nsProfile("b", map[string]string{"team": "blue"})),
		up(wep("a", "local", testNode, "10.0.0.1", map[string]string{"app": "web"})),
		up(wep("a", "a2", "other", "10.0.0.2", map[string]string{"app": "db"}, func(w *v3.WorkloadEndpoint) {
			w.Spec.ServiceAccountName = "sa-db"
		})),
		up(wep("b", "b1", "other", "10.0.1.1", map[string]string{"app": "db"})),
		up(&v3.NetworkSet{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkSet}, ObjectMeta: v3.ObjectMeta{Name: "ns-a", Namespace: "a", Labels: map[string]string{"app": "db"}},
			Spec: v3.NetworkSetSpec{Nets: []string{"192.0.2.0/24"}}}),
		up(&v3.GlobalNetworkSet{TypeMeta: v3.TypeMeta{Kind: v3.KindGlobalNetworkSet}, ObjectMeta: v3.ObjectMeta{Name: "gns", Labels: map[string]string{"app": "db"}},
			Spec: v3.GlobalNetworkSetSpec{Nets: []string{"198.51.100.0/24", "2001:db8::/64"}}}),
		up(&v3.HostEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindHostEndpoint}, ObjectMeta: v3.ObjectMeta{Name: "h1", Labels: map[string]string{"app": "db"}},
			Spec: v3.HostEndpointSpec{Node: "other", InterfaceName: "eth0", ExpectedIPs: []string{"198.18.0.9"}}}),
	}
	cases := []struct {
		name   string
		policy v3.Resource
		want   []string
	}{
		{"NetworkPolicy selector is limited to its namespace",
			np("a", "p", "app == 'web'", nil, allowFrom(v3.EntityRule{Selector: "app == 'db'"})),
			[]string{"10.0.0.2", "192.0.2.0/24"}},
		{"GlobalNetworkPolicy selector sees every endpoint and network set",
			gnp("p", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
				s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "app == 'db'"})}
			}),
			[]string{"10.0.0.2", "10.0.1.1", "192.0.2.0/24", "198.18.0.9", "198.51.100.0/24", "2001:db8::/64"}},
		{"namespaceSelector picks namespaces by their profile's labels",
			np("a", "p", "app == 'web'", nil, allowFrom(v3.EntityRule{NamespaceSelector: "team == 'blue'", Selector: "app == 'db'"})),
			[]string{"10.0.1.1"}},
		{"namespaceSelector global() picks non-namespaced resources",
			gnp("p", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
				s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{NamespaceSelector: "global()", Selector: "app == 'db'"})}
			}),
			[]string{"198.18.0.9", "198.51.100.0/24", "2001:db8::/64"}},
		{"serviceAccounts by name",
			gnp("p", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
				s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{ServiceAccounts: &v3.ServiceAccountMatch{Names: []string{"sa-db"}}})}
			}),
			[]string{"10.0.0.2"}},
		{"namespace label on endpoints",
			gnp("p", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
				s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "projectcalico.org/namespace == 'b'"})}
			}),
			[]string{"10.0.1.1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := run(t, append(slices.Clone(base), up(c.policy))...)
			var p *Policy
			for _, x := range rec.policies {
				p = x
			}
			if p == nil || len(p.Inbound) != 1 || len(p.Inbound[0].SrcIPSets) != 1 {
				t.Fatalf("policy not sent with one source set: %+v", p)
			}
			if got := members(t, rec, p.Inbound[0].SrcIPSets[0]); !reflect.DeepEqual(got, c.want) {
				t.Errorf("members = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlainSelectorSetIDIsUniqueID(t *testing.T) {
	rec := run(t,
		up(wep("a", "local", testNode, "10.0.0.1", map[string]string{"app": "web"})),
		up(gnp("p", "app == 'web'", nil, func(s *v3.GlobalNetworkPolicySpec) {
			s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "app == \"db\""})}
		})))
	want := selector.MustParse("app == 'db'").UniqueID()
	if got := rec.policies[pid("", "p")].Inbound[0].SrcIPSets; !reflect.DeepEqual(got, []string{want}) {
		t.Fatalf("set IDs = %v, want [%s]", got, want)
	}
}

func TestNamedPorts(t *testing.T) {
	tcp := numorstring.ProtocolFromString("TCP")
	rec := run(t,
		up(wep("a", "local", testNode, "10.0.0.1", map[string]string{"app": "web"}, func(w *v3.WorkloadEndpoint) {
			w.Spec.Ports = []v3.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "dns", Protocol: numorstring.ProtocolFromString("UDP"), Port: 53}}
		})),
		up(wep("a", "remote", "other", "10.0.0.2", nil, func(w *v3.WorkloadEndpoint) {
			w.Spec.Ports = []v3.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 80}}
		})),
		up(np("a", "p", "app == 'web'", nil, v3.Rule{Action: v3.Allow, Protocol: &tcp,
			Destination: v3.EntityRule{Ports: []numorstring.Port{numorstring.NamedPort("http"), numorstring.SinglePort(443)}}})))
	r := rec.policies[pid("a", "p")].Inbound[0]
	if !reflect.DeepEqual(r.DstPorts, []PortRange{{443, 443}}) || len(r.DstNamedPortIPSets) != 1 || !strings.HasPrefix(r.DstNamedPortIPSets[0], "n:") {
		t.Fatalf("rule = %+v", r)
	}
	if got, want := members(t, rec, r.DstNamedPortIPSets[0]), []string{"10.0.0.1,tcp:8080", "10.0.0.2,tcp:80"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("named port members = %v, want %v", got, want)
	}
	if rec.setTypes[r.DstNamedPortIPSets[0]] != IPSetIPPort {
		t.Fatalf("type = %s", rec.setTypes[r.DstNamedPortIPSets[0]])
	}
}

// TestNamedPortsAcrossNamespaces: in a NetworkPolicy, a named port with
// no selector resolves on endpoints of every namespace (a Kubernetes
// egress rule to a named port and no peer), while a selector keeps it to
// the policy's namespace.
func TestNamedPortsAcrossNamespaces(t *testing.T) {
	udp := numorstring.ProtocolFromString("UDP")
	withPort := func(w *v3.WorkloadEndpoint) {
		w.Spec.Ports = []v3.WorkloadEndpointPort{{Name: "serve-80-udp", Protocol: udp, Port: 80}}
	}
	egress := func(name string, dst v3.EntityRule) *v3.NetworkPolicy {
		p := np("a", name, "app == 'client'", nil)
		p.Spec.Types = []v3.PolicyType{v3.PolicyTypeEgress}
		dst.Ports = []numorstring.Port{numorstring.NamedPort("serve-80-udp")}
		p.Spec.Egress = []v3.Rule{{Action: v3.Allow, Protocol: &udp, Destination: dst}}
		return p
	}
	rec := run(t,
		up(wep("a", "client", testNode, "10.0.0.1", map[string]string{"app": "client"})),
		up(wep("a", "same-ns", "other", "10.0.0.2", map[string]string{"app": "web"}, withPort)),
		up(wep("b", "other-ns", "other", "10.0.1.2", map[string]string{"app": "web"}, withPort)),
		up(egress("any", v3.EntityRule{})),
		up(egress("selected", v3.EntityRule{Selector: "app == 'web'"})))
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"any", []string{"10.0.0.2,udp:80", "10.0.1.2,udp:80"}},
		{"selected", []string{"10.0.0.2,udp:80"}},
	} {
		r := rec.policies[pid("a", tc.policy)].Outbound[0]
		if len(r.DstNamedPortIPSets) != 1 {
			t.Fatalf("%s: rule = %+v", tc.policy, r)
		}
		if got := members(t, rec, r.DstNamedPortIPSets[0]); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: named port members = %v, want %v", tc.policy, got, tc.want)
		}
	}
}

func TestTierAndPolicyOrder(t *testing.T) {
	tier := func(name string, order *float64, action v3.Action) Update {
		return up(&v3.Tier{TypeMeta: v3.TypeMeta{Kind: v3.KindTier}, ObjectMeta: v3.ObjectMeta{Name: name},
			Spec: v3.TierSpec{Order: order, DefaultAction: &action}})
	}
	inTier := func(p *v3.GlobalNetworkPolicy, tier string) *v3.GlobalNetworkPolicy { p.Spec.Tier = tier; return p }
	rec := run(t,
		tier("security", ord(10), v3.Pass),
		tier("platform", ord(100), v3.Deny),
		up(wep("a", "local", testNode, "10.0.0.1", map[string]string{"app": "web"})),
		up(inTier(gnp("z-first", "all()", ord(1)), "security")),
		up(inTier(gnp("b-unordered", "all()", nil), "security")),
		up(inTier(gnp("a-unordered", "all()", nil), "security")),
		up(inTier(gnp("plat", "all()", ord(5)), "platform")),
		up(np("a", "np-web", "app == 'web'", ord(3))),
		up(np("a", "np-other", "app == 'other'", ord(3))),
		up(gnp("egress-only", "all()", ord(2), func(s *v3.GlobalNetworkPolicySpec) {
			s.Types = []v3.PolicyType{v3.PolicyTypeEgress}
		})),
	)
	ep := rec.endpoints[wid("a", "local")]
	if ep == nil {
		t.Fatal("endpoint not sent")
	}
	g := func(tier, name string) PolicyID { return PolicyID{Tier: tier, Name: name} }
	want := []TierPolicies{
		{Name: "security", DefaultAction: Pass, Ingress: []PolicyID{g("security", "z-first"), g("security", "a-unordered"), g("security", "b-unordered")}},
		{Name: "platform", DefaultAction: Deny, Ingress: []PolicyID{g("platform", "plat")}},
		{Name: "default", DefaultAction: Deny, Ingress: []PolicyID{pid("a", "np-web")}, Egress: []PolicyID{g("default", "egress-only")}},
	}
	if !reflect.DeepEqual(ep.Tiers, want) {
		t.Fatalf("tiers =\n%+v\nwant\n%+v", ep.Tiers, want)
	}
	if _, sent := rec.policies[pid("a", "np-other")]; sent {
		t.Fatal("a policy selecting no local endpoint was sent")
	}
	if !reflect.DeepEqual(ep.Profiles, []string{}) && ep.Profiles != nil {
		t.Fatalf("profiles = %v, want none (kns.a does not exist)", ep.Profiles)
	}
}

func TestHostEndpointCategories(t *testing.T) {
	hep := &v3.HostEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindHostEndpoint}, ObjectMeta: v3.ObjectMeta{Name: "eth0", Labels: map[string]string{"host": "yes"}},
		Spec: v3.HostEndpointSpec{Node: testNode, InterfaceName: "eth0", ExpectedIPs: []string{"198.18.0.1"}}}
	rec := run(t, up(hep),
		up(gnp("normal", "host == 'yes'", nil)),
		up(gnp("fwd", "host == 'yes'", nil, func(s *v3.GlobalNetworkPolicySpec) { s.ApplyOnForward = true })),
		up(gnp("prednat", "host == 'yes'", nil, func(s *v3.GlobalNetworkPolicySpec) { s.PreDNAT, s.ApplyOnForward = true, true })),
		up(gnp("untracked", "host == 'yes'", nil, func(s *v3.GlobalNetworkPolicySpec) { s.DoNotTrack, s.ApplyOnForward = true, true })),
		up(wep("a", "w", testNode, "10.0.0.1", map[string]string{"host": "yes"})),
	)
	e := rec.endpoints[EndpointID{Kind: HostEndpoint, Name: "eth0"}]
	names := func(ts []TierPolicies) []string {
		var out []string
		for _, t := range ts {
			for _, p := range t.Ingress {
				out = append(out, p.Name)
			}
		}
		return out
	}
	for _, c := range []struct {
		what string
		got  []string
		want []string
	}{
		{"tiers", names(e.Tiers), []string{"fwd", "normal"}},
		{"forward", names(e.ForwardTiers), []string{"fwd"}},
		{"preDNAT", names(e.PreDNATTiers), []string{"prednat"}},
		{"untracked", names(e.UntrackedTiers), []string{"untracked"}},
		{"workload", names(rec.endpoints[wid("a", "w")].Tiers), []string{"fwd", "normal"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestPoolsConfigRoutes(t *testing.T) {
	pool := func(name, cidr string, nat bool) Update {
		return up(&v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool}, ObjectMeta: v3.ObjectMeta{Name: name},
			Spec: v3.IPPoolSpec{CIDR: cidr, NATOutgoing: nat}})
	}
	fc := func(name string, spec v3.FelixConfigurationSpec) Update {
		return up(&v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration}, ObjectMeta: v3.ObjectMeta{Name: name}, Spec: spec})
	}
	rec := run(t,
		pool("p1", "10.0.0.0/16", true), pool("p2", "10.1.0.0/16", false), pool("p6", "fd00::/64", true),
		fc("default", v3.FelixConfigurationSpec{DefaultEndpointToHostAction: "Return", ChainInsertMode: "Append", LogSeverityScreen: "Debug"}),
		fc("node."+testNode, v3.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept"}),
		fc("node.other", v3.FelixConfigurationSpec{InterfacePrefix: "tap"}),
		up(wep("a", "w", testNode, "10.0.0.1", nil)),
	)
	if got, want := members(t, rec, IPSetMasqPools), []string{"10.0.0.0/16", "fd00::/64"}; !reflect.DeepEqual(got, want) {
		t.Errorf("masq pools = %v, want %v", got, want)
	}
	if got, want := members(t, rec, IPSetAllPools), []string{"10.0.0.0/16", "10.1.0.0/16", "fd00::/64"}; !reflect.DeepEqual(got, want) {
		t.Errorf("all pools = %v, want %v", got, want)
	}
	c := rec.config
	if c.DefaultEndpointToHostAction != "Accept" || c.ChainInsertMode != "Append" || c.LogSeverityScreen != "Debug" ||
		!reflect.DeepEqual(c.InterfacePrefixes, []string{"cali"}) || !reflect.DeepEqual(c.FailsafeInbound, DefaultFailsafeInbound()) {
		t.Errorf("config = %+v", c)
	}
	if got := rec.routes[netip.MustParsePrefix("10.0.0.1/32")]; got != "caliw" {
		t.Errorf("route = %q, want caliw", got)
	}
	if !rec.inSync {
		t.Error("OnInSync not called")
	}
}

// TestRemovalOrder removes a policy in use: the endpoint is updated before
// the policy and its sets go.
func TestRemovalOrder(t *testing.T) {
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	pol := gnp("p", "all()", nil, func(s *v3.GlobalNetworkPolicySpec) {
		s.Ingress = []v3.Rule{allowFrom(v3.EntityRule{Selector: "app == 'db'"})}
	})
	g.OnUpdates([]Update{up(wep("a", "w", testNode, "10.0.0.1", nil)), up(wep("a", "db", "x", "10.0.0.2", map[string]string{"app": "db"})), up(pol)})
	g.Flush()
	setID := rec.policies[pid("", "p")].Inbound[0].SrcIPSets[0]
	g.OnUpdates([]Update{up(wep("a", "db2", "x", "10.0.0.3", map[string]string{"app": "db"})), del(wep("a", "db", "x", "10.0.0.2", nil))})
	g.Flush()
	if got := members(t, rec, setID); !reflect.DeepEqual(got, []string{"10.0.0.3"}) {
		t.Fatalf("after delta members = %v", got)
	}
	g.OnUpdates([]Update{del(pol)})
	g.Flush()
	if len(rec.policies) != 0 || rec.sets[setID] != nil || len(rec.endpoints[wid("a", "w")].Tiers) != 0 {
		t.Fatalf("after delete: policies %v, set present %v, tiers %v", rec.policies, rec.sets[setID] != nil, rec.endpoints[wid("a", "w")].Tiers)
	}
	g.OnUpdates([]Update{del(wep("a", "w", testNode, "10.0.0.1", nil))})
	g.Flush()
	if len(rec.endpoints) != 0 || len(rec.routes) != 0 {
		t.Fatalf("endpoint or route left: %v %v", rec.endpoints, rec.routes)
	}
	if len(rec.errs) > 0 {
		t.Fatal(strings.Join(rec.errs, "\n"))
	}
}
