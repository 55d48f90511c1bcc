package calc

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// explainBase is the cluster every explain case starts from: namespaces
// prod and dev (their kns. profiles allow everything, as kube-controllers
// writes them), pods on two nodes, a network set, and host endpoints.
const explainBase = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.0.0.0/16}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
  labelsToApply: {pcns.team: prod, pcns.projectcalico.org/name: prod}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.dev}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
  labelsToApply: {pcns.team: dev, pcns.projectcalico.org/name: dev}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-web-eth0, namespace: prod, labels: {app: web}}
spec:
  node: node-a
  orchestrator: k8s
  pod: web
  endpoint: eth0
  interfaceName: caliweb
  ipNetworks: [10.0.0.1/32]
  profiles: [kns.prod]
  ports: [{name: http, protocol: TCP, port: 8080}]
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-client-eth0, namespace: prod, labels: {app: client}}
spec: {node: node-a, orchestrator: k8s, pod: client, endpoint: eth0, interfaceName: caliclient, ipNetworks: [10.0.0.2/32], profiles: [kns.prod]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--b-k8s-other-eth0, namespace: dev, labels: {app: other}}
spec: {node: node-b, orchestrator: k8s, pod: other, endpoint: eth0, interfaceName: caliother, ipNetworks: [10.0.1.1/32], profiles: [kns.dev]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: outside, labels: {zone: outside}}
spec: {nets: [203.0.113.0/24]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-eth0, labels: {role: node}}
spec: {node: node-a, interfaceName: eth0, expectedIPs: [198.18.0.1]}
`

func explainGraph(t *testing.T, yaml string) *Graph {
	t.Helper()
	rs, err := v3.Decode([]byte(explainBase + "---\n" + yaml))
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	g := NewExplainGraph()
	for _, r := range rs {
		v3.Default(r)
		g.OnUpdate(Update{Key: datastore.KeyOf(r), Value: r})
	}
	return g
}

func pod(ns, name string) End { return End{Namespace: ns, Name: name} }
func addr(a string) End       { return End{Address: a} }

func tcpTo(from, to End, port uint16) Query {
	return Query{From: from, To: to, Protocol: 6, SrcPort: 40000, DstPort: port, Hosts: map[string]string{"198.18.0.2": "node-b"}}
}

// decider names a side's decider compactly: "rule <kind> <name> <dir>
// <index>", or its What.
func decider(s Side) string {
	d := s.Decider
	if d == nil {
		return "none"
	}
	if d.Rule != nil {
		return strings.Join([]string{"rule", d.Rule.Kind, d.Rule.Name, d.Rule.Direction, itoa(d.Rule.Index)}, " ")
	}
	return d.What
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestExplain(t *testing.T) {
	cases := []struct {
		name    string
		yaml    string
		q       Query
		verdict Verdict
		// sides are the deciders of each side, in order.
		sides []string
		// miss, when set, must appear in the explanation's rule misses.
		miss string
	}{
		{name: "no policy: the profiles allow", q: tcpTo(pod("prod", "client"), pod("prod", "web"), 80),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.prod egress 0", "rule Profile kns.prod ingress 0"}},
		{name: "ingress allow from a selector", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [80]}}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 80),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.prod egress 0", "rule NetworkPolicy web ingress 0"}},
		{name: "the selector's set does not hold the source", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}}]
`, q: tcpTo(pod("dev", "other"), pod("prod", "web"), 80),
			verdict: VerdictDeny, sides: []string{"rule Profile kns.dev egress 0", "end-of-tier"},
			miss: `source 10.0.1.1 is not in the set of selector app == "client" in namespace prod`},
		{name: "the port does not match", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80, "8000:8080"]}}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 81),
			verdict: VerdictDeny, sides: []string{"rule Profile kns.prod egress 0", "end-of-tier"},
			miss: "destination port 81 is not 80 or 8000:8080"},
		{name: "a named port", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [http]}}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 8080),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.prod egress 0", "rule NetworkPolicy web ingress 0"}},
		{name: "the protocol does not match", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: UDP}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 80),
			verdict: VerdictDeny, sides: []string{"rule Profile kns.prod egress 0", "end-of-tier"}, miss: "protocol tcp is not udp"},
		{name: "Log goes on, Deny decides", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: log-deny}
spec:
  selector: app == 'web'
  ingress: [{action: Log}, {action: Deny, source: {namespaceSelector: team == 'dev'}}, {action: Allow}]
`, q: tcpTo(pod("dev", "other"), pod("prod", "web"), 80),
			verdict: VerdictDeny, sides: []string{"rule Profile kns.dev egress 0", "rule GlobalNetworkPolicy log-deny ingress 1"}},
		{name: "Pass goes to the next tier", yaml: `
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 10}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.pass}
spec:
  tier: security
  selector: app == 'web'
  ingress: [{action: Pass}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: allow-tcp}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP}]
`, q: tcpTo(pod("dev", "other"), pod("prod", "web"), 80),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.dev egress 0", "rule GlobalNetworkPolicy allow-tcp ingress 0"}},
		{name: "a tier whose default is Pass goes on to the profiles", yaml: `
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 10, defaultAction: Pass}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.udp}
spec:
  tier: security
  selector: app == 'web'
  ingress: [{action: Allow, protocol: UDP}]
`, q: tcpTo(pod("dev", "other"), pod("prod", "web"), 80),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.dev egress 0", "rule Profile kns.prod ingress 0"}},
		{name: "services on an Allow matches nothing", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: to-svc}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Allow, protocol: TCP, destination: {services: {name: web, namespace: prod}}}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 80),
			verdict: VerdictDeny, sides: []string{"end-of-tier", "rule Profile kns.prod ingress 0"},
			miss: "never tried: destination.services (EndpointSlices not read from the Kubernetes API) cannot be enforced, so it matches nothing"},
		{name: "services on a Deny denies the rest", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: deny-svc}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Deny, protocol: TCP, destination: {services: {name: web, namespace: prod}}}, {action: Allow}]
`, q: tcpTo(pod("prod", "client"), pod("prod", "web"), 80),
			verdict: VerdictDeny, sides: []string{"rule GlobalNetworkPolicy deny-svc egress 0", "rule Profile kns.prod ingress 0"}},
		{name: "egress to a network set", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: out}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Allow, destination: {selector: zone == 'outside'}}]
`, q: tcpTo(pod("prod", "client"), addr("203.0.113.7"), 443),
			verdict: VerdictAllow, sides: []string{"rule GlobalNetworkPolicy out egress 0"}},
		{name: "notNets", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: out}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Allow, destination: {notNets: [203.0.113.0/28]}}]
`, q: tcpTo(pod("prod", "client"), addr("203.0.113.7"), 443),
			verdict: VerdictDeny, sides: []string{"end-of-tier"}, miss: "destination 203.0.113.7 is in excluded net 203.0.113.0/28"},
		{name: "host to its own workload is not policed", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: deny-all}
spec: {selector: all(), ingress: [{action: Deny}], egress: [{action: Deny}]}
`, q: tcpTo(addr("198.18.0.1"), pod("prod", "web"), 80),
			verdict: VerdictAllow, sides: []string{"host-to-local-workload", "host-to-local-workload"}},
		{name: "a workload to its own host meets defaultEndpointToHostAction", q: tcpTo(pod("prod", "web"), addr("198.18.0.1"), 22),
			verdict: VerdictDeny, sides: []string{"default-endpoint-to-host-action"}},
		{name: "defaultEndpointToHostAction Accept", yaml: `
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node-a}
spec: {defaultEndpointToHostAction: Accept}
`, q: tcpTo(pod("prod", "web"), addr("198.18.0.1"), 22),
			verdict: VerdictAllow, sides: []string{"default-endpoint-to-host-action"}},
		{name: "a failsafe port of a host endpoint", yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: deny-all}
spec: {selector: all(), ingress: [{action: Deny}], egress: [{action: Deny}]}
`, q: tcpTo(pod("dev", "other"), addr("198.18.0.1"), 22),
			verdict: VerdictDeny, sides: []string{"rule GlobalNetworkPolicy deny-all egress 0", "failsafe"}},
		{name: "a host endpoint without policy drops", q: tcpTo(pod("dev", "other"), addr("198.18.0.1"), 8080),
			verdict: VerdictDeny, sides: []string{"rule Profile kns.dev egress 0", "no-profile-allowed"}},
		{name: "a host without a host endpoint is not policed", q: tcpTo(pod("prod", "web"), addr("198.18.0.2"), 8080),
			verdict: VerdictAllow, sides: []string{"rule Profile kns.prod egress 0", "no-host-endpoint"}},
		{name: "ICMP type", yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: ICMP, icmp: {type: 8}}]
`, q: Query{From: pod("prod", "client"), To: pod("prod", "web"), Protocol: 1, ICMPType: 0},
			verdict: VerdictDeny, sides: []string{"rule Profile kns.prod egress 0", "end-of-tier"}, miss: "ICMP type 0 code 0 is not type 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, err := explainGraph(t, c.yaml).Explain(c.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range x.Sides {
				got = append(got, decider(s))
			}
			if x.Verdict != c.verdict || strings.Join(got, "; ") != strings.Join(c.sides, "; ") {
				t.Errorf("verdict %s, deciders %q; want %s, %q", x.Verdict, got, c.verdict, c.sides)
			}
			if c.miss != "" && !hasMiss(x, c.miss) {
				t.Errorf("no rule says %q; misses: %q", c.miss, misses(x))
			}
		})
	}
}

func misses(x *Explanation) []string {
	var out []string
	for _, s := range x.Sides {
		for _, st := range s.Stages {
			if st.Chain == nil {
				continue
			}
			for _, t := range st.Chain.Tiers {
				for _, p := range t.Policies {
					for _, r := range p.Rules {
						if r.Miss != nil {
							out = append(out, r.Miss.Reason)
						}
					}
				}
			}
		}
	}
	return out
}

func hasMiss(x *Explanation, want string) bool {
	for _, m := range misses(x) {
		if strings.Contains(m, want) {
			return true
		}
	}
	return false
}

func TestExplainBadQueries(t *testing.T) {
	g := explainGraph(t, "")
	cases := []struct {
		name string
		q    Query
		want string
	}{
		{"no such pod", tcpTo(pod("prod", "nope"), pod("prod", "web"), 80), `no pod "nope"`},
		{"no such host endpoint", tcpTo(End{Name: "nope"}, pod("prod", "web"), 80), `no HostEndpoint "nope"`},
		{"an address in a pool that nothing holds", tcpTo(addr("10.0.9.9"), pod("prod", "web"), 80), "in IP pool pool (10.0.0.0/16), but no endpoint holds it"},
		{"not an address", tcpTo(addr("10.0.0.999"), pod("prod", "web"), 80), "not an IP address"},
		{"no port for TCP", Query{From: pod("prod", "client"), To: pod("prod", "web"), Protocol: 6}, "needs a destination port"},
		{"a port for ICMP", Query{From: pod("prod", "client"), To: pod("prod", "web"), Protocol: 1, DstPort: 80}, "has no ports"},
		{"ICMPv6 in IPv4", Query{From: pod("prod", "client"), To: pod("prod", "web"), Protocol: 58}, "not of IPv4"},
		{"families differ", tcpTo(pod("prod", "client"), addr("fd00::1"), 80), "no IP version in common"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := g.Explain(c.q)
			if !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a bad query saying %q", err, c.want)
			}
		})
	}
}

// TestExplainSharedAddress: an address two endpoints hold is named as
// ambiguous, with both endpoints, instead of picking one.
func TestExplainSharedAddress(t *testing.T) {
	g := explainGraph(t, `apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--b-k8s-twin-eth0, namespace: dev, labels: {app: twin}}
spec: {node: node-b, orchestrator: k8s, pod: twin, endpoint: eth0, interfaceName: calitwin, ipNetworks: [10.0.0.1/32], profiles: [kns.dev]}
`)
	_, err := g.Explain(tcpTo(addr("10.0.0.1"), pod("prod", "client"), 80))
	want := "--from 10.0.0.1: held by 2 endpoints (WorkloadEndpoint dev/node--b-k8s-twin-eth0, WorkloadEndpoint prod/node--a-k8s-web-eth0): name one"
	if !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want a bad query saying %q", err, want)
	}
}

// TestExplainHostChainModes: where rules outside felix's chains decide
// (chainInsertMode Append; iptablesFilterAllowAction Return for an
// allowed packet), the explanation is marked incomplete and says why.
func TestExplainHostChainModes(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"chainInsertMode: Append", "chainInsertMode Append"},
		{"iptablesFilterAllowAction: Return", "iptablesFilterAllowAction Return"},
	} {
		g := explainGraph(t, "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {"+c.spec+"}\n")
		x, err := g.Explain(tcpTo(pod("prod", "client"), pod("prod", "web"), 80))
		if err != nil || x.Verdict != VerdictAllow || !x.Incomplete || !slices.ContainsFunc(x.Notes, func(n string) bool { return strings.Contains(n, c.want) }) {
			t.Errorf("%s: %v, incomplete %v, notes %q", c.spec, err, x != nil && x.Incomplete, x.Notes)
		}
	}
	x, err := explainGraph(t, "").Explain(tcpTo(pod("prod", "client"), pod("prod", "web"), 80))
	if err != nil || x.Incomplete {
		t.Errorf("defaults: %v, incomplete, notes %q", err, x.Notes)
	}
}
