package v3

import (
	"strings"
	"testing"
)

// TestValidateAsCalico has one row per rule Calico's validator (or its
// CRD schema) applies, with Calico's wording: what Calico accepts passes,
// what it refuses is refused with its reason.
func TestValidateAsCalico(t *testing.T) {
	const h = "apiVersion: projectcalico.org/v3\n"
	np := func(spec string) string {
		return h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: " + spec
	}
	gnp := func(spec string) string { return h + "kind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec: " + spec }
	felix := func(spec string) string {
		return h + "kind: FelixConfiguration\nmetadata: {name: default}\nspec: " + spec
	}
	tests := []struct{ name, in, want string }{
		// Accepted as Calico accepts them.
		{"felix log level Trace", felix("{logSeverityScreen: Trace, logSeveritySys: none}"), ""},
		{"bgp log level Panic", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Panic}", ""},
		{"kube-controllers log level Trace", h + "kind: KubeControllersConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Trace, controllers: {}}",
			`KubeControllersConfiguration "default": spec.logSeverityScreen "Trace": Unsupported value: supported values: "None", "Debug", "Info", "Warning", "Error", "Fatal", "Panic"`},
		{"reservation with host bits", h + "kind: IPReservation\nmetadata: {name: r}\nspec: {reservedCIDRs: [10.0.0.5/24]}", ""},
		{"network set with host bits", h + "kind: NetworkSet\nmetadata: {name: s, namespace: a}\nspec: {nets: [10.0.0.5/24]}", ""},
		{"disabled pool smaller than a block", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/28, disabled: true}", ""},
		{"named port without protocol", np("{ingress: [{action: Allow, destination: {ports: [http]}}]}"), ""},
		{"services of another namespace", np("{egress: [{action: Allow, destination: {services: {name: kubernetes, namespace: default}}}]}"), ""},
		{"ingress source services with source ports", np("{ingress: [{action: Allow, protocol: TCP, source: {services: {name: s}, ports: [80], notPorts: [81]}}]}"), ""},
		{"services of a namespace in a global policy", gnp("{ingress: [{action: Allow, source: {services: {name: s, namespace: prod}}}]}"), ""},
		{"felix patterns ignore case", felix("{chainInsertMode: append, defaultEndpointToHostAction: RETURN}"), ""},
		{"policy name with one dot", h + "kind: NetworkPolicy\nmetadata: {name: sec.allow, namespace: a}\nspec: {tier: default}", ""},
		{"global() alone in a namespaceSelector", gnp("{ingress: [{action: Allow, source: {namespaceSelector: global()}}]}"), ""},
		// Issue 29: what Calico accepts and Palisade refused.
		{"selector-scoped felix configuration", h + "kind: FelixConfiguration\nmetadata: {name: gpu-nodes}\nspec: {nodeSelector: \"role == 'gpu'\", bpfEnabled: true}", ""},
		{"felix failsafe lower-case protocols", felix("{failsafeInboundHostPorts: [{protocol: tcp, port: 22}], failsafeOutboundHostPorts: [{protocol: udp, port: 53}, {protocol: sctp, port: 9}]}"), ""},
		{"bgp filter with interface, peerType, source and operations", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Accept, interface: \"eth*\", peerType: eBGP, source: RemotePeers, operations: [{addCommunity: {value: \"65000:1\"}}, {prependASPath: {prefix: [65000, 65001]}}, {setPriority: {value: 512}}]}], importV6: [{action: Reject, peerType: iBGP, communities: {values: [\"1:2:3\"]}, asPathPrefix: [65100], priority: 10}]}", ""},
		{"kube-controllers log level None", h + "kind: KubeControllersConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: None, controllers: {}}", ""},
		// Issue 29: what Calico accepts and Palisade refuses, with the reason.
		{"node address of an unknown type", h + "kind: Node\nmetadata: {name: n1}\nspec: {addresses: [{address: 10.0.0.1, type: Weird}]}",
			`Node "n1": spec.addresses[0].type "Weird": want one of InternalIP, ExternalIP, CalicoNodeIP: Calico stores another type, but nothing reads an address of it`},
		{"network set in an upper-case namespace", h + "kind: NetworkSet\nmetadata: {name: s, namespace: Prod}\nspec: {nets: [10.0.0.0/8]}",
			`NetworkSet "Prod/s": metadata.namespace "Prod": invalid namespace: want lower-case letters, digits and '-' (at most 63), as a Kubernetes namespace is; Calico stores it, but no namespace of that name can exist`},
		{"profile rule action unknown", h + "kind: Profile\nmetadata: {name: p}\nspec: {ingress: [{action: Frob}]}",
			`Profile "p": spec.ingress[0].action "Frob": want one of Allow, Deny, Log, Pass: Palisade refuses an action no dataplane can enforce, where Calico stores it on a Profile`},
		// Issue 29: what Calico refuses and Palisade accepted.
		{"reservation of a bare address", h + "kind: IPReservation\nmetadata: {name: r}\nspec: {reservedCIDRs: [10.0.0.0/24, 10.0.1.1, \"fd00::1\"]}",
			`IPReservation "r": spec.reservedCIDRs[1] "10.0.1.1": a bare address is not a CIDR (Calico's schema wants one): write 10.0.1.1/32` + "\n" +
				`IPReservation "r": spec.reservedCIDRs[2] "fd00::1": a bare address is not a CIDR (Calico's schema wants one): write fd00::1/128`},
		{"bgp filter interface with '+'", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Accept, interface: \"eth+\"}]}",
			`BGPFilter "f": spec.exportV4[0].interface "eth+": failed to validate Field: Interface because of Tag: bgpFilterInterface`},
		{"bgp filter interface too long", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {importV6: [{action: Accept, interface: averyverylonginterface}]}",
			`BGPFilter "f": spec.importV6[0].interface "averyverylonginterface": failed to validate Field: Interface because of Tag: bgpFilterInterface`},
		{"bgp filter operations on Reject", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Reject, operations: [{setPriority: {value: 5}}]}]}",
			`BGPFilter "f": spec.exportV4[0].operations: operations may only be used with action Accept`},
		{"bgp filter operation with two changes", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Accept, operations: [{setPriority: {value: 5}, addCommunity: {value: \"1:1\"}}]}]}",
			`BGPFilter "f": spec.exportV4[0].operations[0]: exactly one operation must be set`},
		{"bgp filter peer type", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Accept, peerType: ebgp}]}",
			`BGPFilter "f": spec.exportV4[0].peerType "ebgp": want one of eBGP, iBGP`},
		{"bgp peer AS number above int32", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 4200000000}", "decode: " +
			`document 1 (BGPPeer "p"): spec.asNumber number 4200000000: want an integer 0-2147483647: Calico's schema stores a BGPPeer's asNumber as a 32-bit signed integer`},
		{"bgp peer dotted AS number", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: \"64512.10\"}", "decode: " +
			`document 1 (BGPPeer "p"): spec.asNumber string "64512.10": want an integer 0-2147483647: Calico's schema takes a BGPPeer's asNumber as a plain number, not dotted or quoted`},
		{"node with an empty spec.bgp", h + "kind: Node\nmetadata: {name: n1}\nspec: {bgp: {}}",
			`Node "n1": spec.bgp: Spec.BGP should not be empty`},
		{"endpoint network of many addresses", h + "kind: WorkloadEndpoint\nmetadata: {name: n1-k8s-p-eth0, namespace: a}\nspec: {orchestrator: k8s, node: n1, pod: p, endpoint: eth0, interfaceName: cali1, ipNetworks: [10.0.0.5/32, 10.0.0.0/24]}",
			`WorkloadEndpoint "a/n1-k8s-p-eth0": spec.ipNetworks[1] "10.0.0.0/24": IP network contains multiple addresses`},
		{"endpoint without an interface", h + "kind: WorkloadEndpoint\nmetadata: {name: n1-k8s-p-eth0, namespace: a}\nspec: {orchestrator: k8s, node: n1, pod: p, endpoint: eth0, ipNetworks: [10.0.0.5/32]}",
			`WorkloadEndpoint "a/n1-k8s-p-eth0": spec.interfaceName: an interface name is required (Calico's interface tag refuses an empty one)`},
		{"notNets of every address", np("{ingress: [{action: Allow, source: {notNets: [0.0.0.0/0]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.notNets[0] "0.0.0.0/0": every address is in 0.0.0.0/0, so a rule that excludes it matches nothing`},
		{"notNets of every IPv6 address", gnp("{egress: [{action: Deny, destination: {notNets: [\"::/0\"]}}]}"),
			`GlobalNetworkPolicy "g": spec.egress[0].destination.notNets[0] "::/0": every address is in ::/0, so a rule that excludes it matches nothing`},
		{"nets of every address", np("{ingress: [{action: Allow, source: {nets: [0.0.0.0/0]}}]}"), ""},
		{"profile with an upper-case name", h + "kind: Profile\nmetadata: {name: Prof}",
			`Profile "Prof": metadata.name "Prof": invalid name: want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit`},
		// Selector-scoped FelixConfiguration names.
		{"felix selector on default", felix("{nodeSelector: all()}"),
			`FelixConfiguration "default": spec.nodeSelector "all()": only a configuration named other than "default" or "node.<nodename>" selects nodes`},
		{"felix other name without a selector", h + "kind: FelixConfiguration\nmetadata: {name: gpu}\nspec: {bpfEnabled: true}",
			`FelixConfiguration "gpu": metadata.name "gpu": want "default", "node.<nodename>", or a spec.nodeSelector choosing the nodes this configuration applies to`},
		{"felix bad node selector", h + "kind: FelixConfiguration\nmetadata: {name: gpu}\nspec: {nodeSelector: \"role = 'x'\"}",
			`FelixConfiguration "gpu": spec.nodeSelector: selector "role = 'x'": at position 5: expected "=="`},
		// Cross-field rules.
		{"ICMP needs ipVersion 4", np("{ingress: [{action: Allow, protocol: ICMP, ipVersion: 6}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].ipVersion 6: must set ipversion to '4' with protocol icmp`},
		{"ICMPv6 needs ipVersion 6", np("{ingress: [{action: Allow, protocol: ICMPv6, ipVersion: 4}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].ipVersion 4: must set ipversion to '6' with protocol icmpv6`},
		{"ICMP fields need protocol ICMP", np("{ingress: [{action: Allow, protocol: TCP, icmp: {type: 8}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].icmp: rules that specify ICMP fields must set protocol to ICMP`},
		{"mixed IPv4 and IPv6 nets", np("{ingress: [{action: Allow, source: {nets: [10.0.0.0/8]}, destination: {nets: [\"fd00::/8\"]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].destination.nets: rule contains both IPv4 and IPv6 CIDRs`},
		{"nets of the other version", np("{ingress: [{action: Allow, ipVersion: 4, source: {nets: [\"fd00::/8\"]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.nets: rule IP version doesn't match CIDR version`},
		{"HTTP only on Allow", np("{ingress: [{action: Deny, http: {methods: [GET]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].http: only valid for Allow rules`},
		{"HTTP only on TCP", np("{ingress: [{action: Allow, protocol: UDP, http: {methods: [GET]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].protocol "UDP": rules that specify HTTP fields must set protocol to TCP or empty`},
		{"HTTP not in egress", np("{egress: [{action: Allow, http: {methods: [GET]}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].http: not allowed in egress rule`},
		{"HTTP duplicate methods", np("{ingress: [{action: Allow, http: {methods: [GET, GET]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].http.methods: Invalid methods (duplicates): [GET GET]`},
		{"HTTP path", np("{ingress: [{action: Allow, http: {paths: [{exact: foo}]}}]}"),
			"NetworkPolicy \"prod/np\": spec.ingress[0].http.paths: Invalid path foo. (must start with `/` and not contain `?` or `#`"},
		{"services in an egress source", np("{egress: [{action: Allow, source: {services: {name: s}}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].source.services: not allowed in egress rule source`},
		{"services in an ingress destination", np("{ingress: [{action: Allow, destination: {services: {name: s}}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].destination.services: not allowed in ingress rule destination`},
		{"services need a namespace in a global policy", gnp("{egress: [{action: Allow, destination: {services: {name: s}}}]}"),
			`GlobalNetworkPolicy "g": spec.egress[0].destination.services.namespace: must specify a namespace`},
		{"services with a selector", np("{egress: [{action: Allow, destination: {services: {name: s}, selector: all()}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].destination.services: cannot specify Selector/NotSelector and Services on the same rule`},
		{"services with ports", np("{egress: [{action: Allow, protocol: TCP, destination: {services: {name: s}, ports: [80]}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].destination.ports: cannot specify ports with a service selector`},
		{"services with notPorts", np("{egress: [{action: Allow, protocol: TCP, destination: {services: {name: s}, notPorts: [80]}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].destination.notPorts: cannot specify notports with a service selector`},
		{"services without a name", np("{egress: [{action: Allow, destination: {services: {namespace: prod}}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].destination.services: must specify a service name`},
		{"services with a namespaceSelector", np("{ingress: [{action: Allow, source: {services: {name: s}, namespaceSelector: all()}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.services: cannot specify NamespaceSelector and Services on the same rule`},
		{"services with a notSelector", np("{ingress: [{action: Allow, source: {services: {name: s}, notSelector: a == 'b'}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.services: cannot specify Selector/NotSelector and Services on the same rule`},
		{"services with serviceAccounts", np("{ingress: [{action: Allow, source: {services: {name: s}, serviceAccounts: {names: [x]}}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.services: cannot specify ServiceAccounts and Services on the same rule`},
		{"services with nets", np("{egress: [{action: Allow, destination: {services: {name: s}, nets: [10.0.0.0/8]}}]}"),
			`NetworkPolicy "prod/np": spec.egress[0].destination.services: cannot specify Nets/NotNets and Services on the same rule`},
		{"services with notNets", np("{ingress: [{action: Allow, source: {services: {name: s}, notNets: [10.0.0.0/8]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.services: cannot specify Nets/NotNets and Services on the same rule`},
		{"source services need a namespace in a global policy", gnp("{ingress: [{action: Allow, source: {services: {name: s}}}]}"),
			`GlobalNetworkPolicy "g": spec.ingress[0].source.services.namespace: must specify a namespace`},
		{"LoadBalancer pool nodeSelector", h + "kind: IPPool\nmetadata: {name: lb}\nspec: {cidr: 10.9.0.0/16, allowedUses: [LoadBalancer], nodeSelector: \"has(a)\"}",
			`IPPool "lb": spec.nodeSelector "has(a)": IP pools with the LoadBalancer allowed use must have nodeSelector all()`},
		{"enabled pool smaller than a block", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/28}",
			`IPPool "p": spec.cidr "10.0.0.0/28": IP pool size is too small for use with Calico IPAM. It must be equal to or greater than the block size.`},
		{"mesh password with the mesh off", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {nodeToNodeMeshEnabled: false, nodeMeshPassword: {secretKeyRef: {name: s, key: k}}}",
			`BGPConfiguration "default": spec.nodeMeshPassword: spec.NodeMeshPassword cannot be set if spec.NodeToNodeMesh is disabled`},
		{"mesh restart time with the mesh off", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {nodeToNodeMeshEnabled: false, nodeMeshMaxRestartTime: 10s}",
			`BGPConfiguration "default": spec.nodeMeshMaxRestartTime: spec.NodeMeshMaxRestartTime cannot be set if spec.NodeToNodeMesh is disabled`},
		{"communities nothing uses", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {communities: [{name: c, value: \"1:2\"}]}",
			`BGPConfiguration "default": spec.communities: communities are defined but not used in Spec.PrefixAdvertisement[].`},
		{"community not defined", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [nope]}]}",
			`BGPConfiguration "default": spec.prefixAdvertisements[0].communities[0] "nope": community used is invalid or not defined.`},
		{"asNumber with peerSelector", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {asNumber: 65000, peerSelector: has(rr)}",
			`BGPPeer "p": spec.asNumber "65000": ASNumber field must be empty when PeerSelector is specified`},
		{"node with nodeSelector", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {node: n1, nodeSelector: all(), peerSelector: has(rr)}",
			`BGPPeer "p": spec.node "n1": Node field must be empty when NodeSelector is specified`},
		{"local workload peer", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {localWorkloadSelector: \"color == 'red'\", asNumber: 65401}", ""},
		{"local workload peer without an AS", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {localWorkloadSelector: all()}",
			`BGPPeer "p": spec.asNumber: asNumber is required when localWorkloadSelector is set`},
		{"local workload peer with peerIP", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {localWorkloadSelector: all(), peerIP: 10.0.0.1, asNumber: 65401}",
			`BGPPeer "p": spec.peerIP "10.0.0.1": peerIP must be empty when localWorkloadSelector is set`},
		{"local workload peer with peerSelector", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {localWorkloadSelector: all(), peerSelector: all()}",
			`BGPPeer "p": spec.peerSelector "all()": peerSelector must be empty when localWorkloadSelector is set` + "\n" +
				`BGPPeer "p": spec.asNumber: asNumber is required when localWorkloadSelector is set`},
		{"reachableBy of the other family", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 1, reachableBy: \"fd00::1\"}",
			`BGPPeer "p": spec.reachableBy "fd00::1": ReachableBy and PeerIP address family mismatched`},
		{"reachableBy not an address", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 1, reachableBy: gw}",
			`BGPPeer "p": spec.reachableBy "gw": ReachableBy is invalid address`},
		{"global() in an endpoint selector", np("{ingress: [{action: Allow, source: {selector: global()}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].source.selector "global()": global() can only be used in an EntityRule namespaceSelector`},
		{"global() combined", gnp("{ingress: [{action: Allow, source: {namespaceSelector: \"global() && has(a)\"}}]}"),
			`GlobalNetworkPolicy "g": spec.ingress[0].source.namespaceSelector "global() && has(a)": global() cannot be combined with other selectors`},
		{"global() as the policy selector", gnp("{selector: global()}"),
			`GlobalNetworkPolicy "g": spec.selector "global()": global() can only be used in an EntityRule namespaceSelector`},
		{"default tier order", h + "kind: Tier\nmetadata: {name: default}\nspec: {order: 5, defaultAction: Deny}",
			`Tier "default": spec.order: default tier order must be 1000000`},
		{"default tier action", h + "kind: Tier\nmetadata: {name: default}\nspec: {order: 1000000, defaultAction: Pass}",
			`Tier "default": spec.defaultAction "Pass": The 'default' tier must have default action 'Deny'`},
		{"kube-baseline tier order and action", h + "kind: Tier\nmetadata: {name: kube-baseline}\nspec: {order: 10000000}",
			`Tier "kube-baseline": spec.defaultAction "Deny": The 'kube-baseline' tier must have default action 'Pass'`},
		{"kube-admin tier order", h + "kind: Tier\nmetadata: {name: kube-admin}\nspec: {order: 1, defaultAction: Pass}",
			`Tier "kube-admin": spec.order: kube-admin tier order must be 1000`},
		{"adminnetworkpolicy tier order", h + "kind: Tier\nmetadata: {name: adminnetworkpolicy}\nspec: {order: 1, defaultAction: Pass}",
			`Tier "adminnetworkpolicy": spec.order: adminnetworkpolicy tier order must be 1000`},
		{"baselineadminnetworkpolicy tier action", h + "kind: Tier\nmetadata: {name: baselineadminnetworkpolicy}\nspec: {order: 10000000}",
			`Tier "baselineadminnetworkpolicy": spec.defaultAction "Deny": The 'baselineadminnetworkpolicy' tier must have default action 'Pass'`},
		{"dotted GlobalNetworkPolicy name outside the ANP prefixes", h + "kind: GlobalNetworkPolicy\nmetadata: {name: kanp.other.x}\nspec: {}",
			`GlobalNetworkPolicy "kanp.other.x": metadata.name "kanp.other.x": name must consist of lower case alphanumeric characters or '-' (regex: [a-z0-9]([-a-z0-9]*[a-z0-9])?)`},
		// Single-field formats and ranges.
		{"port 0", np("{ingress: [{action: Allow, protocol: TCP, destination: {ports: [0]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].destination.ports[0] "0": port range invalid, port number must be between 1 and 65535`},
		{"numeric port without protocol", np("{ingress: [{action: Allow, destination: {ports: [80]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].destination.ports: rules with numeric port or port range must set protocol to TCP or UDP or SCTP`},
		{"lower-case protocol", np("{ingress: [{action: Allow, protocol: tcp}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].protocol "tcp": protocol name invalid`},
		{"protocol 0", np("{ingress: [{action: Allow, protocol: 0}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].protocol 0: protocol number invalid`},
		{"more than 50 ports", np("{ingress: [{action: Allow, protocol: TCP, destination: {ports: [" + strings.Repeat("1,", 50) + "1]}}]}"),
			`NetworkPolicy "prod/np": spec.ingress[0].destination.ports: Too many: 51: must have at most 50 items`},
		{"interface format", h + "kind: HostEndpoint\nmetadata: {name: h}\nspec: {node: n1, interfaceName: \"eth 0\"}",
			`HostEndpoint "h": spec.interfaceName "eth 0": failed to validate Field: InterfaceName because of Tag: interface`},
		{"containerID format", h + "kind: WorkloadEndpoint\nmetadata: {name: w, namespace: a}\nspec: {node: n1, interfaceName: cali1, containerID: \"-abc\"}",
			`WorkloadEndpoint "a/w": spec.containerID "-abc": failed to validate Field: ContainerID because of Tag: containerID`},
		{"felix pattern", felix("{chainInsertMode: Prepend}"),
			`FelixConfiguration "default": spec.chainInsertMode "Prepend": should match '^(?i)(Insert|Append)?$'`},
		{"felix enum", felix("{bpfRedirectToPeer: enabled}"),
			`FelixConfiguration "default": spec.bpfRedirectToPeer "enabled": Unsupported value: supported values: "Enabled", "Disabled", "L2Only"`},
		{"felix range", felix("{goGCThreshold: -2}"),
			`FelixConfiguration "default": spec.goGCThreshold -2: should be greater than or equal to -1`},
		{"felix route table ranges", felix("{routeTableRange: {min: 1, max: 250}, routeTableRanges: [{min: 1, max: 250}]}"),
			"FelixConfiguration \"default\": spec.routeTableRange: cannot be set when `RouteTableRanges` is also set"},
		{"felix failsafe protocol", felix("{failsafeInboundHostPorts: [{protocol: ICMP, port: 22}]}"),
			`FelixConfiguration "default": spec.failsafeInboundHostPorts[0].protocol "ICMP": protocol must be 'TCP' or 'UDP' or 'SCTP' (any case)`},
		{"ignored interface format", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {ignoredInterfaces: [\"*\"]}",
			`BGPConfiguration "default": spec.ignoredInterfaces[0] "*": failed to validate Field: IgnoredInterfaces because of Tag: ignoredInterface`},
		// Names and labels.
		{"dots in a policy name", h + "kind: NetworkPolicy\nmetadata: {name: a.b.c, namespace: x}",
			`NetworkPolicy "x/a.b.c": metadata.name "a.b.c": name must consist of lower case alphanumeric characters or '-' (regex: [a-z0-9]([-a-z0-9]*[a-z0-9])?)`},
		{"knp.default. policy name", h + "kind: NetworkPolicy\nmetadata: {name: knp.default.allow.all, namespace: x}", ""},
		{"dots in a global policy name", h + "kind: GlobalNetworkPolicy\nmetadata: {name: a.b.c}",
			`GlobalNetworkPolicy "a.b.c": metadata.name "a.b.c": name must consist of lower case alphanumeric characters or '-' (regex: [a-z0-9]([-a-z0-9]*[a-z0-9])?)`},
		{"dots in a tier name", h + "kind: Tier\nmetadata: {name: a.b}",
			`Tier "a.b": metadata.name "a.b": name must consist of lower case alphanumeric characters or '-' (regex: [a-z0-9]([-a-z0-9]*[a-z0-9])?)`},
		{"tier name length", h + "kind: Tier\nmetadata: {name: " + strings.Repeat("t", 64) + "}",
			`Tier "` + strings.Repeat("t", 64) + `": metadata.name "` + strings.Repeat("t", 64) + `": name is too long by 1 bytes`},
		{"reserved namespace label on a network set", h + "kind: GlobalNetworkSet\nmetadata: {name: s, labels: {projectcalico.org/namespace: x}}",
			`GlobalNetworkSet "s": metadata.labels "projectcalico.org/namespace": projectcalico.org/namespace is not a valid label name`},
		{"reserved namespace label on a namespaced network set", h + "kind: NetworkSet\nmetadata: {name: s, namespace: a, labels: {projectcalico.org/namespace: a}}",
			`NetworkSet "a/s": metadata.labels "projectcalico.org/namespace": projectcalico.org/namespace is not a valid label name`},
		// Calico refuses no other projectcalico.org/ label, and this one
		// only on network sets.
		{"other calico labels on a network set", h + "kind: GlobalNetworkSet\nmetadata: {name: s, labels: {projectcalico.org/orchestrator: k8s, projectcalico.org/tier: t}}", ""},
		{"namespace label on a host endpoint", h + "kind: HostEndpoint\nmetadata: {name: h, labels: {projectcalico.org/namespace: x}}\nspec: {node: node-1, interfaceName: eth0}", ""},
		{"namespace label on a profile", h + "kind: Profile\nmetadata: {name: p, labels: {projectcalico.org/namespace: x}}", ""},
		{"namespace label on a global policy", h + "kind: GlobalNetworkPolicy\nmetadata: {name: g, labels: {projectcalico.org/namespace: x}}", ""},
		// References within one resource.
		{"endpoint name not matching", h + "kind: WorkloadEndpoint\nmetadata: {name: wrong, namespace: a}\nspec: {orchestrator: k8s, node: node-1, pod: web-0, endpoint: eth0, interfaceName: cali1}",
			`WorkloadEndpoint "a/wrong": metadata.name "wrong": the WorkloadEndpoint name does not match the primary identifiers assigned in the Spec: expected name node--1-k8s-web--0-eth0`},
		// Staged policies.
		{"staged policy", h + "kind: StagedNetworkPolicy\nmetadata: {name: s, namespace: a}\nspec: {stagedAction: Set, selector: all(), ingress: [{action: Allow}]}", ""},
		{"staged delete with rules", h + "kind: StagedGlobalNetworkPolicy\nmetadata: {name: s}\nspec: {stagedAction: Delete, ingress: [{action: Allow}]}",
			`StagedGlobalNetworkPolicy "s": spec: Spec fields, except Tier, should all be zero-value if stagedAction is Delete`},
		{"staged bad action", h + "kind: StagedKubernetesNetworkPolicy\nmetadata: {name: s, namespace: a}\nspec: {stagedAction: Apply, podSelector: {}}",
			`StagedKubernetesNetworkPolicy "a/s": spec.stagedAction "Apply": Unsupported value: supported values: "Set", "Delete"`},
		{"staged kubernetes policy", h + "kind: StagedKubernetesNetworkPolicy\nmetadata: {name: s, namespace: a}\nspec: {podSelector: {matchLabels: {app: web}}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}], ports: [{protocol: TCP, port: 80}]}], policyTypes: [Ingress]}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Decode([]byte(tt.in))
			if err != nil {
				if got := "decode: " + err.Error(); got != tt.want {
					t.Errorf("Decode:\n got: %s\nwant: %s", got, tt.want)
				}
				return
			}
			Default(rs[0])
			err = Validate(rs[0])
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}
