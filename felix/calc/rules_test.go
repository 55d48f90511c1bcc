package calc

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestUnenforceableFieldsFailClosed checks every rule field felix cannot
// enforce: an Allow or Log rule with one matches nothing, a Deny or Pass
// rule denies what the rest of it matches; never is the field just left
// out of an Allow.
func TestUnenforceableFieldsFailClosed(t *testing.T) {
	proto := func(s string) *numorstring.Protocol { p := numorstring.ProtocolFromString(s); return &p }
	tcp, icmp, icmp6 := proto("TCP"), proto("ICMP"), proto("ICMPv6")
	svc := &v3.ServiceMatch{Name: "kubernetes", Namespace: "default"}
	port := func(p uint16) []numorstring.Port { return []numorstring.Port{numorstring.SinglePort(p)} }
	cases := []struct {
		name string
		rule v3.Rule
		// kept is whether a rule is compiled; action is its action then.
		kept   bool
		action Action
		gap    string
	}{
		{"destination.services on Allow", v3.Rule{Action: v3.Allow, Protocol: tcp, Destination: v3.EntityRule{Services: svc}}, false, "", "destination.services"},
		{"source.services on Allow", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Services: svc}}, false, "", "source.services"},
		{"services on Deny", v3.Rule{Action: v3.Deny, Protocol: tcp, Destination: v3.EntityRule{Services: svc}}, true, Deny, "destination.services"},
		{"services on Pass", v3.Rule{Action: v3.Pass, Destination: v3.EntityRule{Services: svc}}, true, Deny, "destination.services"},
		{"services on Log", v3.Rule{Action: v3.Log, Destination: v3.EntityRule{Services: svc}}, false, "", "destination.services"},
		{"http methods", v3.Rule{Action: v3.Allow, Protocol: tcp, HTTP: &v3.HTTPMatch{Methods: []string{"GET"}}}, false, "", "http"},
		{"http paths", v3.Rule{Action: v3.Allow, Protocol: tcp, HTTP: &v3.HTTPMatch{Paths: []v3.HTTPPath{{Prefix: "/api"}}}}, false, "", "http"},
		{"empty http matches all", v3.Rule{Action: v3.Allow, Protocol: tcp, HTTP: &v3.HTTPMatch{}}, true, Allow, ""},
		{"icmp without protocol", v3.Rule{Action: v3.Allow, ICMP: &v3.ICMPFields{Type: intp(8)}}, false, "", "icmp"},
		{"icmp code without type", v3.Rule{Action: v3.Allow, Protocol: icmp, ICMP: &v3.ICMPFields{Code: intp(0)}}, false, "", "icmp.code"},
		{"icmp type 255 is any to iptables", v3.Rule{Action: v3.Allow, Protocol: icmp, ICMP: &v3.ICMPFields{Type: intp(255)}}, false, "", "icmp.type"},
		{"notICMP code out of range", v3.Rule{Action: v3.Deny, Protocol: icmp6, NotICMP: &v3.ICMPFields{Type: intp(1), Code: intp(300)}}, true, Deny, "notICMP.code"},
		{"bad protocol", v3.Rule{Action: v3.Allow, Protocol: proto("Bogus")}, false, "", "protocol"},
		{"bad notProtocol", v3.Rule{Action: v3.Allow, NotProtocol: proto("Bogus")}, false, "", "notProtocol"},
		{"bad ipVersion", v3.Rule{Action: v3.Allow, IPVersion: intp(5)}, false, "", "ipVersion"},
		{"ports without protocol", v3.Rule{Action: v3.Allow, Destination: v3.EntityRule{Ports: port(80)}}, false, "", "destination.ports"},
		{"notPorts of ICMP", v3.Rule{Action: v3.Allow, Protocol: icmp, Source: v3.EntityRule{NotPorts: port(80)}}, false, "", "source.notPorts"},
		{"named port of ICMP", v3.Rule{Action: v3.Allow, Protocol: icmp, Destination: v3.EntityRule{Ports: []numorstring.Port{numorstring.NamedPort("http")}}}, false, "", "destination.ports"},
		{"bad net", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Nets: []string{"10.0.0.0/33"}}}, false, "", "source.nets"},
		{"bad notNet on Deny", v3.Rule{Action: v3.Deny, Destination: v3.EntityRule{NotNets: []string{"nope"}}}, true, Deny, "destination.notNets"},
		{"bad selector", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{Selector: "a =="}}, false, "", "source.selector"},
		{"bad notSelector", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{NotSelector: "a =="}}, false, "", "source.notSelector"},
		{"bad namespaceSelector", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{NamespaceSelector: "a =="}}, false, "", "source.namespaceSelector"},
		{"bad serviceAccounts selector", v3.Rule{Action: v3.Allow, Source: v3.EntityRule{ServiceAccounts: &v3.ServiceAccountMatch{Selector: "a =="}}}, false, "", "source.serviceAccounts.selector"},
		{"unknown action", v3.Rule{Action: "Maybe", Protocol: tcp}, true, Deny, "action"},
		{"lower-case action", v3.Rule{Action: "allow", Protocol: tcp}, true, Allow, ""},
		// Not gaps: a rule no packet can match matches nothing.
		{"ICMP with ipVersion 6", v3.Rule{Action: v3.Deny, Protocol: icmp, IPVersion: intp(6)}, false, "", ""},
		{"every enforced field", v3.Rule{Action: v3.Allow, Protocol: tcp, IPVersion: intp(4), NotProtocol: proto("UDP"),
			Metadata: &v3.RuleMetadata{Annotations: map[string]string{"a": "b"}},
			Source: v3.EntityRule{Nets: []string{"10.0.0.0/8"}, NotNets: []string{"10.1.0.0/16"}, Selector: "a == 'b'", NotSelector: "c == 'd'",
				NamespaceSelector: "e == 'f'", NotPorts: port(1), ServiceAccounts: &v3.ServiceAccountMatch{Names: []string{"x"}}},
			Destination: v3.EntityRule{Ports: []numorstring.Port{numorstring.NamedPort("http"), numorstring.SinglePort(443)}}}, true, Allow, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules, _, all := newRuleCompiler().compile([]v3.Rule{c.rule}, "", "ingress")
			notes := gapTexts(all)
			if (len(rules) == 1) != c.kept {
				t.Fatalf("compiled %d rules, want kept=%v", len(rules), c.kept)
			}
			if c.kept && rules[0].Action != c.action {
				t.Errorf("action %s, want %s", rules[0].Action, c.action)
			}
			switch {
			case c.gap == "" && len(notes) > 0:
				t.Errorf("notes %q, want none", notes)
			case c.gap != "" && (len(notes) != 1 || !strings.Contains(notes[0], c.gap)):
				t.Errorf("notes %q, want one naming %s", notes, c.gap)
			}
		})
	}
}

// TestDenyWithServicesDeniesTheRest: a Deny rule loses only the field it
// cannot enforce; the rest still narrows it.
func TestDenyWithServicesDeniesTheRest(t *testing.T) {
	tcp := numorstring.ProtocolFromString("TCP")
	rules, _, _ := newRuleCompiler().compile([]v3.Rule{{Action: v3.Deny, Protocol: &tcp,
		Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "kubernetes"}, Ports: []numorstring.Port{numorstring.SinglePort(443)}}}}, "", "egress")
	if len(rules) != 1 || rules[0].Protocol != 6 || len(rules[0].DstPorts) != 1 || rules[0].DstPorts[0] != (PortRange{443, 443}) {
		t.Fatalf("got %+v, want a Deny of TCP to port 443", rules)
	}
}

// TestUnenforceableRuleLoggedOncePerPolicy: the warning names the policy
// and the field, once, and again only when the policy's gaps change.
func TestUnenforceableRuleLoggedOncePerPolicy(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	tcp := numorstring.ProtocolFromString("TCP")
	pol := func(name string, rules ...v3.Rule) *v3.GlobalNetworkPolicy {
		return gnp(name, "all()", nil, func(s *v3.GlobalNetworkPolicySpec) { s.Egress = rules })
	}
	svcRule := v3.Rule{Action: v3.Allow, Protocol: &tcp, Destination: v3.EntityRule{Services: &v3.ServiceMatch{Name: "kubernetes", Namespace: "default"}}}
	warnings := func() []string {
		var out []string
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "not enforced") {
				out = append(out, e.Data["policy"].(string)+": "+e.Message)
			}
		}
		hook.Reset()
		return out
	}
	rec := newRecorder()
	g := NewGraph(testNode, rec)
	g.OnUpdate(up(nsProfile("ns", nil)))
	g.OnUpdate(up(wep("ns", "a", testNode, "10.0.0.1", nil)))
	g.OnUpdate(up(pol("to-api", svcRule)))
	g.OnInSync()
	g.Flush()
	w := warnings()
	if len(w) != 1 || !strings.Contains(w[0], "to-api") || !strings.Contains(w[0], "destination.services") || !strings.Contains(w[0], "matches nothing") {
		t.Fatalf("warnings %q, want one naming to-api and destination.services", w)
	}
	// The same gaps again (another endpoint, a changed order): no new warning.
	g.OnUpdate(up(wep("ns", "b", testNode, "10.0.0.2", nil)))
	p := pol("to-api", svcRule)
	p.Spec.Order = ord(5)
	g.OnUpdate(up(p))
	g.Flush()
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warnings %q, want none for unchanged gaps", w)
	}
	// A second unenforceable rule is news.
	g.OnUpdate(up(pol("to-api", svcRule, v3.Rule{Action: v3.Allow, HTTP: &v3.HTTPMatch{Methods: []string{"GET"}}})))
	g.Flush()
	if w := warnings(); len(w) != 2 {
		t.Fatalf("warnings %q, want both rules named", w)
	}
}

func intp(i int) *int { return &i }
