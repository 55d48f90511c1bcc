package v3

import (
	"strings"
	"testing"
)

// TestValidate decodes each row's YAML, defaults it and validates it.
func TestValidate(t *testing.T) {
	const h = "apiVersion: projectcalico.org/v3\n"
	tests := []struct {
		name, in, want string
	}{
		// IPPool
		{"pool ok", h + "kind: IPPool\nmetadata: {name: pool-a}\nspec: {cidr: 10.0.0.0/16, vxlanMode: CrossSubnet}", ""},
		{"pool v6 ok", h + "kind: IPPool\nmetadata: {name: p6}\nspec: {cidr: fd00::/48, blockSize: 120}", ""},
		{"pool bad cidr", h + "kind: IPPool\nmetadata: {name: pool-a}\nspec: {cidr: 10.0.0.0/33}",
			`IPPool "pool-a": spec.cidr "10.0.0.0/33": invalid CIDR`},
		{"pool host bits", h + "kind: IPPool\nmetadata: {name: pool-a}\nspec: {cidr: 10.0.0.1/16}",
			`IPPool "pool-a": spec.cidr "10.0.0.1/16": host bits are set: the network is 10.0.0.0/16`},
		{"pool no cidr", h + "kind: IPPool\nmetadata: {name: pool-a}",
			`IPPool "pool-a": spec.cidr: a CIDR is required`},
		{"pool block size v4", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/8, blockSize: 19}",
			`IPPool "p": spec.blockSize 19: want 20-32 for an IPv4 pool`},
		{"pool block size v6", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: fd00::/48, blockSize: 26}",
			`IPPool "p": spec.blockSize 26: want 116-128 for an IPv6 pool`},
		{"pool smaller than block", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/28}",
			`IPPool "p": spec.cidr "10.0.0.0/28": IP pool size is too small for use with Calico IPAM. It must be equal to or greater than the block size.`},
		{"pool both encaps", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16, ipipMode: Always, vxlanMode: CrossSubnet}",
			`IPPool "p": spec: ipipMode "Always" and vxlanMode "CrossSubnet" cannot both be enabled`},
		{"pool bad mode", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16, ipipMode: always}",
			`IPPool "p": spec.ipipMode "always": want one of Always, CrossSubnet, Never`},
		{"pool ipip v6", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: fd00::/48, ipipMode: Always}",
			`IPPool "p": spec.ipipMode "Always": IP-in-IP is not supported on IPv6 pools`},
		{"pool link local", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 169.254.0.0/20}",
			`IPPool "p": spec.cidr "169.254.0.0/20": overlaps the link-local range 169.254.0.0/16`},
		{"pool selector", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16, nodeSelector: \"a = 'b'\"}",
			`IPPool "p": spec.nodeSelector: selector "a = 'b'": at position 2: expected "=="`},
		{"pool bad name", h + "kind: IPPool\nmetadata: {name: Pool_A}\nspec: {cidr: 10.0.0.0/16}",
			`IPPool "Pool_A": metadata.name "Pool_A": invalid name: want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit`},
		{"pool namespace", h + "kind: IPPool\nmetadata: {name: p, namespace: default}\nspec: {cidr: 10.0.0.0/16}",
			`IPPool "p": metadata.namespace "default": IPPool is cluster-scoped and takes no namespace`},
		{"pool lb mixed", h + "kind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/16, allowedUses: [Workload, LoadBalancer]}",
			`IPPool "p": spec.allowedUses: LoadBalancer cannot be combined with Workload or Tunnel`},
		{"no name", h + "kind: IPPool\nspec: {cidr: 10.0.0.0/16}",
			`IPPool "": metadata.name: a name is required`},
		{"bad label", h + "kind: IPPool\nmetadata: {name: p, labels: {\"a b\": c}}\nspec: {cidr: 10.0.0.0/16}",
			`IPPool "p": metadata.labels "a b": invalid label key: want at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit`},
		// IPReservation, IPAMConfiguration
		{"reservation ok", h + "kind: IPReservation\nmetadata: {name: r}\nspec: {reservedCIDRs: [10.0.0.0/24, 10.0.1.1/32]}", ""},
		{"reservation bad", h + "kind: IPReservation\nmetadata: {name: r}\nspec: {reservedCIDRs: [10.0.0.0/240]}",
			`IPReservation "r": spec.reservedCIDRs[0] "10.0.0.0/240": invalid CIDR`},
		{"ipam name", h + "kind: IPAMConfiguration\nmetadata: {name: other}\nspec: {strictAffinity: false}",
			`IPAMConfiguration "other": metadata.name "other": the only allowed name is "default"`},
		// BGP
		{"bgpconfig ok", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {asNumber: 65000, serviceClusterIPs: [{cidr: 10.96.0.0/12}], communities: [{name: c1, value: \"65000:100\"}], prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [c1, \"1:2:3\"]}]}", ""},
		{"bgpconfig node field", h + "kind: BGPConfiguration\nmetadata: {name: node.n1}\nspec: {asNumber: 65000}",
			`BGPConfiguration "node.n1": spec.asNumber: may only be set in the "default" BGPConfiguration`},
		{"bgpconfig name", h + "kind: BGPConfiguration\nmetadata: {name: mine}",
			`BGPConfiguration "mine": metadata.name "mine": want "default" or "node.<nodename>"`},
		{"bgpconfig community", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {communities: [{name: c, value: \"70000:1\"}], prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [c]}]}",
			`BGPConfiguration "default": spec.communities[0].value "70000:1": invalid community value or format used.`},
		{"bgpconfig log", h + "kind: BGPConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Loud}",
			`BGPConfiguration "default": spec.logSeverityScreen "Loud": should match '^(?i)(Trace|Debug|Info|Warning|Error|Fatal|Panic)?$'`},
		{"peer ok with port", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: \"10.0.0.1:1790\", asNumber: 65001, nodeSelector: \"rack == 'a'\"}", ""},
		{"peer v6 with port", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: \"[aa::1]:179\", asNumber: 65001}", ""},
		{"peer inline password", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 65001, password: {value: s3cret}}", ""},
		{"peer secret password", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 65001, password: {secretKeyRef: {name: bgp, key: rr}}}", ""},
		{"peer password empty", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 65001, password: {}}",
			`BGPPeer "p": spec.password: secretKeyRef or value is required`},
		{"peer password both", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 65001, password: {value: x, secretKeyRef: {name: bgp, key: rr}}}",
			`BGPPeer "p": spec.password: set secretKeyRef or value, not both`},
		{"peer bad ip", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.300, asNumber: 1}",
			`BGPPeer "p": spec.peerIP "10.0.0.300": want an IP address, optionally with a port: 10.0.0.1, 10.0.0.1:179 or [aa::1]:179`},
		{"peer node and selector", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {node: n1, nodeSelector: all(), peerSelector: has(rr)}",
			`BGPPeer "p": spec.node "n1": Node field must be empty when NodeSelector is specified`},
		{"peer ip and selector", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1, asNumber: 1, peerSelector: has(rr)}",
			`BGPPeer "p": spec.peerIP "10.0.0.1": PeerIP field must be empty when PeerSelector is specified` + "\n" +
				`BGPPeer "p": spec.asNumber "1": ASNumber field must be empty when PeerSelector is specified`},
		{"peer nothing", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {node: n1}",
			`BGPPeer "p": spec: one of peerIP, peerSelector or localWorkloadSelector is required`},
		{"peer no AS", h + "kind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 10.0.0.1}",
			`BGPPeer "p": spec.asNumber: an AS number is required with peerIP`},
		{"filter ok", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {importV6: [{action: Accept, matchOperator: Equal, cidr: \"5000::/64\"}, {action: Reject}]}", ""},
		{"filter wrong family", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{action: Accept, matchOperator: In, cidr: \"5000::/64\"}]}",
			`BGPFilter "f": spec.exportV4[0].cidr "5000::/64": want an IPv4 address`},
		{"filter no action", h + "kind: BGPFilter\nmetadata: {name: f}\nspec: {exportV4: [{cidr: 10.0.0.0/8, matchOperator: In}]}",
			`BGPFilter "f": spec.exportV4[0].action: an action is required (Accept or Reject)`},
		// Node
		{"node ok", h + "kind: Node\nmetadata: {name: n1}\nspec: {bgp: {ipv4Address: 10.0.0.1/24, routeReflectorClusterID: 224.0.0.1}, vxlanTunnelMACAddr: \"66:aa:bb:cc:dd:ee\"}", ""},
		{"node v6 in v4", h + "kind: Node\nmetadata: {name: n1}\nspec: {bgp: {ipv4Address: \"fd00::1/64\"}}",
			`Node "n1": spec.bgp.ipv4Address "fd00::1/64": want an IPv4 address`},
		{"node bad mac", h + "kind: Node\nmetadata: {name: n1}\nspec: {vxlanTunnelMACAddr: \"66:aa:bb\"}",
			`Node "n1": spec.vxlanTunnelMACAddr "66:aa:bb": invalid MAC address`},
		// Endpoints
		{"wep ok", h + "kind: WorkloadEndpoint\nmetadata: {name: n1-k8s-p-eth0, namespace: ns}\nspec: {node: n1, interfaceName: cali1234567890a, mac: \"ca:fe:1d:52:bb:e9\", ipNetworks: [10.0.0.5/32], ports: [{name: http, protocol: TCP, port: 80}]}", ""},
		{"wep long interface", h + "kind: WorkloadEndpoint\nmetadata: {name: w, namespace: ns}\nspec: {node: n1, interfaceName: cali1234567890abc}",
			`WorkloadEndpoint "ns/w": spec.interfaceName "cali1234567890abc": failed to validate Field: InterfaceName because of Tag: interface`},
		{"wep nat empty", h + "kind: WorkloadEndpoint\nmetadata: {name: w, namespace: ns}\nspec: {node: n1, interfaceName: cali1, ipNATs: [{internalIP: \"\", externalIP: 1.2.3.4}]}",
			`WorkloadEndpoint "ns/w": spec.ipNATs[0].internalIP: an IP address is required`},
		{"wep port icmp", h + "kind: WorkloadEndpoint\nmetadata: {name: w, namespace: ns}\nspec: {node: n1, interfaceName: cali1, ports: [{name: p, protocol: ICMP, port: 1}]}",
			`WorkloadEndpoint "ns/w": spec.ports[0].protocol "ICMP": named ports need TCP, UDP or SCTP`},
		{"hep star ok", h + "kind: HostEndpoint\nmetadata: {name: h}\nspec: {node: n1, interfaceName: \"*\"}", ""},
		{"hep nothing", h + "kind: HostEndpoint\nmetadata: {name: h}\nspec: {node: n1}",
			`HostEndpoint "h": spec: interfaceName or expectedIPs is required`},
		{"hep slash", h + "kind: HostEndpoint\nmetadata: {name: h}\nspec: {node: n1, interfaceName: eth/0}",
			`HostEndpoint "h": spec.interfaceName "eth/0": failed to validate Field: InterfaceName because of Tag: interface`},
		// Policy
		{"np ok", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {selector: \"app == 'db'\", ingress: [{action: Allow, protocol: TCP, source: {selector: \"app == 'web'\"}, destination: {ports: [5432, \"8000:8080\", http]}}]}", ""},
		{"np action", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: allow}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].action "allow": want one of Allow, Deny, Log, Pass`},
		{"np ports without protocol", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, destination: {ports: [80]}}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].destination.ports: rules with numeric port or port range must set protocol to TCP or UDP or SCTP`},
		{"np ports icmp", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {egress: [{action: Allow, protocol: ICMP, destination: {ports: [80]}}]}",
			`NetworkPolicy "prod/np": spec.egress[0].destination.ports: rules that specify ports must set protocol to TCP or UDP or SCTP`},
		{"np bad protocol", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, protocol: GRE}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].protocol "GRE": protocol name invalid`},
		{"np icmp type", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, protocol: ICMP, icmp: {type: 255}}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].icmp.type 255: want an ICMP type 0-254`},
		{"np icmp code without type", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, protocol: ICMPv6, icmp: {code: 1}}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].icmp.code 1: ICMP code specified without an ICMP type`},
		{"np icmp version", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, ipVersion: 6, protocol: ICMP, icmp: {type: 8}}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].ipVersion 6: must set ipversion to '4' with protocol icmp`},
		{"np nets version", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, ipVersion: 4, source: {nets: [\"fd00::/8\"]}}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].source.nets: rule IP version doesn't match CIDR version`},
		{"np types vs rules", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {types: [Ingress], egress: [{action: Allow}]}",
			`NetworkPolicy "prod/np": spec.egress: egress rules are given but spec.types does not include Egress`},
		{"np ip version", h + "kind: NetworkPolicy\nmetadata: {name: np, namespace: prod}\nspec: {ingress: [{action: Allow, ipVersion: 5}]}",
			`NetworkPolicy "prod/np": spec.ingress[0].ipVersion 5: want 4 or 6`},
		{"gnp prednat", h + "kind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec: {preDNAT: true, ingress: [{action: Deny}]}",
			`GlobalNetworkPolicy "g": spec.applyOnForward: ApplyOnForward must be true if either PreDNAT or DoNotTrack is true, for a given PolicySpec`},
		{"tier ok", h + "kind: Tier\nmetadata: {name: security}\nspec: {order: 100, defaultAction: Pass}", ""},
		{"tier action", h + "kind: Tier\nmetadata: {name: security}\nspec: {defaultAction: Allow}",
			`Tier "security": spec.defaultAction "Allow": Unsupported value: supported values: "Pass", "Deny"`},
		{"profile ok", h + "kind: Profile\nmetadata: {name: kns.default}\nspec: {labelsToApply: {a: b}, egress: [{action: Allow}]}", ""},
		{"networkset bad net", h + "kind: NetworkSet\nmetadata: {name: s, namespace: ns}\nspec: {nets: [10.0.0.0/8, 1.2.3.4/40]}",
			`NetworkSet "ns/s": spec.nets[1] "1.2.3.4/40": invalid CIDR`},
		{"globalnetworkset ok", h + "kind: GlobalNetworkSet\nmetadata: {name: s}\nspec: {nets: [10.0.0.0/8, 1.2.3.4, \"fd00::/8\"]}", ""},
		// Config kinds
		{"felix ok", h + "kind: FelixConfiguration\nmetadata: {name: default}\nspec: {chainInsertMode: Append, iptablesBackend: nft, interfaceExclude: \"kube-ipvs0,/^veth.*/\", vxlanVNI: 4096}", ""},
		{"felix enum", h + "kind: FelixConfiguration\nmetadata: {name: default}\nspec: {defaultEndpointToHostAction: Allow}",
			`FelixConfiguration "default": spec.defaultEndpointToHostAction "Allow": should match '^(?i)(Drop|Accept|Return)?$'`},
		{"felix backend", h + "kind: FelixConfiguration\nmetadata: {name: node.n1}\nspec: {iptablesBackend: iptables}",
			`FelixConfiguration "node.n1": spec.iptablesBackend "iptables": should match '^(?i)(Auto|Legacy|NFT)?$'`},
		{"felix failsafe", h + "kind: FelixConfiguration\nmetadata: {name: default}\nspec: {failsafeInboundHostPorts: [{protocol: icmp, port: 0}]}",
			`FelixConfiguration "default": spec.failsafeInboundHostPorts[0].protocol "icmp": protocol must be 'TCP' or 'UDP' or 'SCTP' (any case)`},
		{"felix vni", h + "kind: FelixConfiguration\nmetadata: {name: default}\nspec: {vxlanVNI: 0}",
			`FelixConfiguration "default": spec.vxlanVNI 0: want 1-16777215`},
		{"clusterinfo name", h + "kind: ClusterInformation\nmetadata: {name: x}",
			`ClusterInformation "x": metadata.name "x": the only allowed name is "default"`},
		{"kcc ok", h + "kind: KubeControllersConfiguration\nmetadata: {name: default}\nspec: {healthChecks: Enabled, controllers: {node: {syncLabels: Enabled}}}", ""},
		{"kcc enum", h + "kind: KubeControllersConfiguration\nmetadata: {name: default}\nspec: {healthChecks: Maybe, controllers: {}}",
			`KubeControllersConfiguration "default": spec.healthChecks "Maybe": want one of Enabled, Disabled`},
		{"apiconfig no name ok", h + "kind: CalicoAPIConfig\nmetadata:\nspec: {datastoreType: etcdv3, etcdEndpoints: \"http://10.0.0.1:2379,https://10.0.0.2:2379\"}", ""},
		{"apiconfig bad endpoint", h + "kind: CalicoAPIConfig\nspec: {datastoreType: etcdv3, etcdEndpoints: \"10.0.0.1:2379\"}",
			`CalicoAPIConfig "": spec.etcdEndpoints "10.0.0.1:2379": want a URL like http://10.0.0.1:2379`},
		{"apiconfig datastore", h + "kind: CalicoAPIConfig\nspec: {datastoreType: etcdv2}",
			`CalicoAPIConfig "": spec.datastoreType "etcdv2": want one of etcdv3, kubernetes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(rs) != 1 {
				t.Fatalf("decoded %d resources", len(rs))
			}
			Default(rs[0])
			got := ""
			if err := Validate(rs[0]); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

// TestValidateReportsAll checks that several problems come back together,
// one line each.
func TestValidateReportsAll(t *testing.T) {
	p := &IPPool{ObjectMeta: ObjectMeta{Name: "p"}, Spec: IPPoolSpec{CIDR: "10.0.0.1/16", IPIPMode: "Sometimes"}}
	err := Validate(p)
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`IPPool "p": spec.cidr "10.0.0.1/16": host bits are set: the network is 10.0.0.0/16`,
		`IPPool "p": spec.ipipMode "Sometimes": want one of Always, CrossSubnet, Never`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
