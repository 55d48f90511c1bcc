package felix

import "testing"

// ruleFields are the rule fields the core scenarios leave out. Pods as in
// core: web (ns-a, app=web), client (ns-a), other (ns-b); every pod serves
// TCP and UDP on 8080, 8081, 9000 and 9001.
var ruleFields = []scenario{
	{name: "notSelector", yaml: gnpHead + `metadata: {name: not-ns-b}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {notSelector: "projectcalico.org/namespace == 'ns-b'"}}]
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080), deny("other", "web", "udp", 9000)}},
	{name: "notSelector with selector", yaml: gnpHead + `metadata: {name: clients-not-b}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {selector: app == 'client', notSelector: "projectcalico.org/namespace == 'ns-b'"}}]
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080), deny("ext", "web", "tcp", 8080)}},
	{name: "notPorts numbers and range", yaml: gnpHead + `metadata: {name: not-ports}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {notPorts: [8081, "9000:9001"]}}]
`, probes: []probe{
		allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081),
		deny("client", "web", "tcp", 9000), deny("client", "web", "tcp", 9001), deny("client", "web", "udp", 8080),
	}},
	{name: "ports range", yaml: gnpHead + `metadata: {name: port-range}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: UDP, destination: {ports: ["8081:9000"]}}]
`, probes: []probe{
		deny("client", "web", "udp", 8080), allow("client", "web", "udp", 8081), allow("client", "web", "udp", 9000),
		deny("client", "web", "udp", 9001), deny("client", "web", "tcp", 8081),
	}},
	{name: "notProtocol", yaml: gnpHead + `metadata: {name: not-udp}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, notProtocol: UDP}]
`, probes: []probe{
		allow("client", "web", "tcp", 8080), deny("client", "web", "udp", 8080), allow("client", "web", "icmp", 0),
		allow("client", "web", "sctp", 9000),
	}},
	{name: "ipVersion", yaml: gnpHead + `metadata: {name: ip-version}
spec:
  selector: app == 'web'
  ingress:
  - {action: Allow, ipVersion: 4, protocol: TCP}
  - {action: Allow, ipVersion: 6, protocol: UDP}
`, probes: []probe{allow("client", "web", "tcp", 8080), deny("client", "web", "udp", 8080)}},
	// Without an EndpointSlice source (felix outside Kubernetes) a rule
	// naming a Service cannot be enforced: the Allow must match nothing,
	// not all TCP egress.
	{name: "destination.services on Allow matches nothing", yaml: gnpHead + `metadata: {name: to-kubernetes}
spec:
  selector: app == 'client'
  types: [Egress]
  egress:
  - {action: Allow, protocol: TCP, destination: {services: {name: kubernetes, namespace: default}}}
  - {action: Allow, protocol: UDP}
`, probes: []probe{
		deny("client", "web", "tcp", 8080), deny("client", "ext", "tcp", 8080),
		allow("client", "web", "udp", 8080),
	}},
	{name: "source.services on Allow matches nothing", yaml: gnpHead + `metadata: {name: from-service}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {services: {name: client, namespace: ns-a}}}, {action: Allow, protocol: UDP}]
`, probes: []probe{deny("client", "web", "tcp", 8080), deny("ext", "web", "tcp", 8080), allow("client", "web", "udp", 9000)}},
	// A Deny loses only the field: it denies all TCP egress.
	{name: "destination.services on Deny denies the rest of the rule", yaml: gnpHead + `metadata: {name: deny-kubernetes}
spec:
  selector: app == 'client'
  types: [Egress]
  egress:
  - {action: Deny, protocol: TCP, destination: {services: {name: kubernetes, namespace: default}}}
  - {action: Allow}
`, probes: []probe{deny("client", "web", "tcp", 8080), deny("client", "ext", "tcp", 8080), allow("client", "web", "udp", 8080)}},
}

func TestRuleFields(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newCluster(t, dp)
			setupPods(c)
			runScenarios(t, c, ruleFields)
		})
	}
}
