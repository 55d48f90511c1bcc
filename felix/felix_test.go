package felix

import (
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// scenario is policy written to etcd and the packets that prove it.
type scenario struct {
	name   string
	yaml   string
	probes []probe
}

func allow(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port, allowed: true}
}

func deny(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port}
}

const gnpHead = `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
`

// core are the policy semantics run on both backends. Pods: web (ns-a,
// app=web, named port http=8080), client (ns-a, app=client, sa-x), other
// (ns-b, app=client, sa-y).
var core = []scenario{
	{name: "profiles only allow everything", probes: []probe{
		allow("client", "web", "tcp", 8080), allow("client", "web", "udp", 8081), allow("other", "web", "icmp", 0),
		allow("client", "web", "sctp", 9000),
	}},
	{name: "allow tcp port, rest of ingress denied", yaml: `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web-8080, namespace: ns-a}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}]
`, probes: []probe{
		allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), deny("client", "web", "udp", 8080),
		deny("client", "web", "icmp", 0),
		// The selector is scoped to ns-a: the client of ns-b is not in it.
		deny("other", "web", "tcp", 8080),
		// Egress of web is not selected: its profile allows.
		allow("web", "client", "tcp", 8080),
	}},
	{name: "deny rule", yaml: gnpHead + `metadata: {name: deny-udp}
spec:
  selector: app == 'web'
  ingress: [{action: Deny, protocol: UDP}, {action: Allow}]
`, probes: []probe{allow("client", "web", "tcp", 8081), deny("client", "web", "udp", 8080)}},
	// The Allow must end the policy's walk: the Deny after it never sees
	// an allowed packet.
	{name: "allow then deny in one policy", yaml: gnpHead + `metadata: {name: allow-then-deny}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}, {action: Deny, protocol: TCP}, {action: Allow}]
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), allow("client", "web", "udp", 8080)}},
	{name: "order: lower order first", yaml: gnpHead + `metadata: {name: first}
spec:
  order: 10
  selector: app == 'web'
  ingress: [{action: Deny, protocol: TCP, destination: {ports: [8081]}}]
---
` + gnpHead + `metadata: {name: second}
spec:
  order: 20
  selector: app == 'web'
  ingress: [{action: Allow}]
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081)}},
	{name: "tiers and pass", yaml: `apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
` + gnpHead + `metadata: {name: security.gate}
spec:
  tier: security
  selector: app == 'web'
  ingress:
  - {action: Deny, source: {namespaceSelector: team == 'ns-b'}}
  - {action: Pass, protocol: TCP}
---
` + gnpHead + `metadata: {name: default.tcp-8080}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`, probes: []probe{
		// Passed by the security tier, allowed by the default tier.
		allow("client", "web", "tcp", 8080),
		// Passed, then not allowed by the default tier.
		deny("client", "web", "tcp", 8081),
		// Not passed: end of the security tier drops it.
		deny("client", "web", "udp", 8080),
		// Denied in the security tier although the default tier allows.
		deny("other", "web", "tcp", 8080),
	}},
	{name: "named port", yaml: gnpHead + `metadata: {name: named}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [http]}}]
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081)}},
	{name: "namespaceSelector", yaml: gnpHead + `metadata: {name: from-b}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {namespaceSelector: team == 'ns-b'}}]
`, probes: []probe{allow("other", "web", "tcp", 8080), deny("client", "web", "tcp", 8080)}},
	{name: "serviceAccounts", yaml: gnpHead + `metadata: {name: from-sa}
spec:
  selector: app == 'web'
  ingress:
  - {action: Allow, protocol: TCP, source: {serviceAccounts: {names: [sa-x]}}, destination: {ports: [8080]}}
  - {action: Allow, protocol: UDP, source: {serviceAccounts: {selector: role == 'sa-y'}}}
`, probes: []probe{
		allow("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080),
		allow("other", "web", "udp", 8080), deny("client", "web", "udp", 8080),
	}},
	{name: "nets and notNets", yaml: gnpHead + `metadata: {name: nets}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {nets: [10.65.0.0/16], notNets: [10.65.0.2/32]}}]
`, probes: []probe{allow("other", "web", "tcp", 8080), deny("client", "web", "tcp", 8080)}},
	{name: "network set", yaml: `apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: trusted, labels: {role: trusted}}
spec: {nets: [10.65.0.3/32]}
---
` + gnpHead + `metadata: {name: from-set}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {selector: role == 'trusted'}}]
`, probes: []probe{allow("other", "web", "tcp", 8080), deny("client", "web", "tcp", 8080)}},
	{name: "ICMP type and code", yaml: gnpHead + `metadata: {name: icmp}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: ICMP, icmp: {type: 8, code: 0}}]
`, probes: []probe{allow("client", "web", "icmp", 0), deny("client", "web", "tcp", 8080)}},
	{name: "notICMP", yaml: gnpHead + `metadata: {name: not-echo}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: ICMP, notICMP: {type: 8}}, {action: Allow, protocol: TCP}]
`, probes: []probe{deny("client", "web", "icmp", 0), allow("client", "web", "tcp", 8080)}},
	{name: "SCTP port", yaml: gnpHead + `metadata: {name: sctp}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: SCTP, destination: {ports: [9000]}}]
`, probes: []probe{allow("client", "web", "sctp", 9000), deny("client", "web", "sctp", 9001), deny("client", "web", "tcp", 8080)}},
	{name: "egress", yaml: gnpHead + `metadata: {name: client-egress}
spec:
  selector: app == 'client'
  types: [Egress]
  egress: [{action: Allow, protocol: UDP, destination: {ports: [8081]}}]
`, probes: []probe{
		allow("client", "web", "udp", 8081), deny("client", "web", "udp", 8080), deny("other", "web", "tcp", 8080),
		allow("web", "client", "tcp", 8080),
	}},
}

func runScenarios(t *testing.T, c *cluster, scenarios []scenario) {
	for _, s := range scenarios {
		t.Run(strings.ReplaceAll(s.name, " ", "_"), func(t *testing.T) {
			c.t = t
			rs := c.apply(s.yaml)
			defer func() { c.remove(rs); c.waitPolicies(rs, false) }()
			c.waitPolicies(rs, true)
			c.expect(s.probes...)
		})
	}
}

func setupPods(c *cluster) {
	c.addPod("ns-a", "web", "10.65.0.1", map[string]string{"app": "web"}, "sa-w")
	c.addPod("ns-a", "client", "10.65.0.2", map[string]string{"app": "client"}, "sa-x")
	c.addPod("ns-b", "other", "10.65.0.3", map[string]string{"app": "client"}, "sa-y")
}

func TestPolicy(t *testing.T) {
	for _, backend := range append(dataplanes, bpfNoTCX, bpfNoLoop) {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend)
			setupPods(c)
			runScenarios(t, c, core)
			c.t = t
			if c.bpf {
				c.checkBPFEnforces()
				c.checkAttachedWithTC(c.noTCX)
				c.checkEngineObject(!c.noLoop)
				return
			}
			// The backend actually used.
			save := "iptables-nft-save"
			if backend == "Legacy" {
				save = "iptables-legacy-save"
			}
			if out := c.node.MustRun(t, save, "-t", "filter"); !strings.Contains(out, "cali-from-wl-dispatch") {
				t.Errorf("%s shows no felix chains", save)
			}
		})
	}
}

var _ = nstest.ProbeTimeout
var _ = time.Second
