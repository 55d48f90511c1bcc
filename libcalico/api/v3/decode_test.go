package v3

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "unknown field",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\nspec: {cidr: 10.0.0.0/8}\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: pool-a\nspec:\n  cidrr: 10.0.0.0/8\n",
			want: `document 2 (IPPool "pool-a"): unknown field "spec.cidrr"`,
		},
		{
			name: "wrong type",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.0.0.0/8, blockSize: abc}\n",
			want: `document 1 (IPPool "p"): spec.blockSize: cannot use string "abc", want integer`,
		},
		{
			name: "integer out of range",
			in:   "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: w}\nspec: {ports: [{name: a, protocol: TCP, port: 70000}]}\n",
			want: `document 1 (WorkloadEndpoint "w"): spec.ports[0].port: 70000 is out of range 0-65535`,
		},
		{
			name: "unknown kind",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPol\n",
			want: `document 1: unknown kind "IPPol"`,
		},
		{
			name: "alias as kind",
			in:   "apiVersion: projectcalico.org/v3\nkind: ippool\n",
			want: `document 1: unknown kind "ippool" (did you mean "IPPool"?)`,
		},
		{name: "missing kind", in: "apiVersion: projectcalico.org/v3\nmetadata: {name: x}\n", want: `document 1: missing kind`},
		{
			name: "wrong apiVersion",
			in:   "apiVersion: projectcalico.org/v2\nkind: IPPool\nmetadata: {name: p}\n",
			want: `document 1 (IPPool "p"): apiVersion "projectcalico.org/v2" is not supported, want projectcalico.org/v3`,
		},
		{
			name: "missing apiVersion",
			in:   "kind: IPPool\nmetadata: {name: p}\n",
			want: `document 1 (IPPool "p"): missing apiVersion, want projectcalico.org/v3`,
		},
		{
			name: "malformed YAML, line counted over the whole input",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nspec:\n  cidr: [10.0.0.0/8\n",
			want: `document 2: invalid YAML: line 8: did not find expected ',' or ']'`,
		},
		{
			name: "duplicate key, line counted over the whole input",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\n---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  egress:\n  - action: Allow\n    destination: {selector: a == 'b'}\n    destination: {ports: [80]}\n",
			want: "document 2: invalid YAML: unmarshal errors:\n  line 12: key \"destination\" already set in map",
		},
		{
			name: "not an object",
			in:   "- a\n- b\n",
			want: `document 1: cannot use a list, want object`,
		},
		{
			name: "list item of another kind",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPoolList\nitems:\n- kind: BGPPeer\n  metadata: {name: x}\n",
			want: `document 1, item 1: kind "BGPPeer" does not belong in a IPPoolList`,
		},
		{
			name: "list item error",
			in:   "apiVersion: projectcalico.org/v3\nkind: IPPoolList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n  spec: {natOutgoing: yes please}\n",
			want: `document 1, item 2 (IPPool "b"): spec.natOutgoing: cannot use string "yes please", want boolean (true or false)`,
		},
		{
			name: "bad duration",
			in:   "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {routeRefreshInterval: 90}\n",
			want: `document 1 (FelixConfiguration "default"): spec.routeRefreshInterval: duration 90: want a string like "90s" or "5m"`,
		},
		{
			name: "JSON syntax error",
			in:   "{\"apiVersion\": \"projectcalico.org/v3\",\n \"kind\": \"IPPool\",\n \"spec\": {\"cidr\" 1}}",
			want: `document 1: invalid JSON: line 3: invalid character '1' after object key`,
		},
		{
			name: "bad port in rule",
			in:   "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec:\n  ingress:\n  - action: Allow\n    protocol: TCP\n    destination: {ports: [\"90:80\"]}\n",
			want: `document 1 (GlobalNetworkPolicy "g"): spec.ingress[0].destination.ports[0]: port range 90:80: minimum is above maximum`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error:\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestDecodeDocuments(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		names []string // kind/name of each decoded resource
	}{
		{
			name:  "multi-document with empty and comment-only documents",
			in:    "---\n# nothing here\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\nspec: {cidr: 10.0.0.0/16}\n---\n\n---\napiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata: {name: b, namespace: ns}\nspec: {nets: [10.1.0.0/16]}\n",
			names: []string{"IPPool/a", "NetworkSet/b"},
		},
		{
			name:  "list with kind and apiVersion defaulted from the list",
			in:    "apiVersion: projectcalico.org/v3\nkind: BGPPeerList\nmetadata: {resourceVersion: \"7\"}\nitems:\n- metadata: {name: p1}\n  spec: {peerIP: 10.0.0.1, asNumber: 65001}\n- apiVersion: projectcalico.org/v3\n  kind: BGPPeer\n  metadata: {name: p2}\n  spec: {peerIP: \"[aa::1]:179\", asNumber: 65002, localASNumber: \"1.10\"}\n",
			names: []string{"BGPPeer/p1", "BGPPeer/p2"},
		},
		{
			name:  "JSON stream",
			in:    `{"apiVersion":"projectcalico.org/v3","kind":"Tier","metadata":{"name":"t1"},"spec":{"order":100}}` + "\n" + `{"apiVersion":"projectcalico.org/v3","kind":"Profile","metadata":{"name":"p"}}`,
			names: []string{"Tier/t1", "Profile/p"},
		},
		{name: "empty input", in: "", names: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				if r.GetTypeMeta().APIVersion != APIVersion {
					t.Errorf("%s has apiVersion %q", r.GetObjectMeta().Name, r.GetTypeMeta().APIVersion)
				}
				got = append(got, r.GetTypeMeta().Kind+"/"+r.GetObjectMeta().Name)
			}
			if !reflect.DeepEqual(got, tt.names) {
				t.Fatalf("decoded %v, want %v", got, tt.names)
			}
		})
	}
}

func TestDecodeValues(t *testing.T) {
	rs, err := Decode([]byte(`apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: p
  creationTimestamp: 2018-02-12T11:33:04Z
spec:
  peerIP: "[aa::1]:1790"
  asNumber: 65000
  localASNumber: "64512.10"
  keepaliveTime: 30s
`))
	if err != nil {
		t.Fatal(err)
	}
	p := rs[0].(*BGPPeer)
	if p.Spec.LocalASNumber == nil || *p.Spec.LocalASNumber != 64512<<16|10 {
		t.Errorf("localASNumber = %v, want %d", p.Spec.LocalASNumber, 64512<<16|10)
	}
	if p.Spec.KeepaliveTime == nil || p.Spec.KeepaliveTime.Seconds() != 30 {
		t.Errorf("keepaliveTime = %v, want 30s", p.Spec.KeepaliveTime)
	}
	if got := p.CreationTimestamp.Format("2006-01-02T15:04:05Z"); got != "2018-02-12T11:33:04Z" {
		t.Errorf("creationTimestamp = %s", got)
	}
}

// TestRoundTrip decodes every valid seed example and a resource of each
// kind, marshals it to YAML and decodes it again: the result must be equal.
func TestRoundTrip(t *testing.T) {
	inputs := []string{roundTripYAML}
	for _, f := range []string{"01-ippool", "03-bgpconfigurationlist", "05-node", "06-bgppeer", "10-bgpconfiguration", "12-hostendpoint", "14-ippool", "17-profile", "18-calicoapiconfig"} {
		inputs = append(inputs, readSeed(t, f+".yaml"))
	}
	for i, in := range inputs {
		rs, err := Decode([]byte(in))
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		for _, r := range rs {
			out, err := yaml.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Decode(out)
			if err != nil {
				t.Fatalf("re-decoding %s: %v\n%s", r.GetObjectMeta().Name, err, out)
			}
			if len(again) != 1 || !reflect.DeepEqual(again[0], r) {
				t.Errorf("%s %q changed in a round trip:\n%s", r.GetTypeMeta().Kind, r.GetObjectMeta().Name, out)
			}
			// Calico prints an empty status on the kinds whose status is a
			// struct (Node, Tier, KubeControllersConfiguration), and on no
			// other.
			kind := r.GetTypeMeta().Kind
			wantStatus := kind == KindNode || kind == KindTier || kind == KindKubeControllersConfiguration
			if strings.Contains(string(out), "\nstatus:") != wantStatus {
				t.Errorf("%s %q: status printed is %v, want %v:\n%s", kind, r.GetObjectMeta().Name, !wantStatus, wantStatus, out)
			}
		}
	}
}

const roundTripYAML = `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: g, labels: {a: b}}
spec:
  tier: security
  order: 10.5
  selector: all()
  namespaceSelector: has(x)
  types: [Ingress, Egress]
  doNotTrack: true
  applyOnForward: true
  ingress:
  - action: Allow
    ipVersion: 4
    protocol: ICMP
    icmp: {type: 8, code: 0}
    source:
      nets: [10.0.0.0/8]
      notSelector: a == 'b'
      serviceAccounts: {names: [x], selector: y == 'z'}
    metadata: {annotations: {k: v}}
  egress:
  - action: Deny
    protocol: 6
    destination: {ports: [80, "8080:8090", http], services: {name: s, namespace: ns}}
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  ipipEnabled: false
  vxlanVNI: 4096
  iptablesBackend: NFT
  routeRefreshInterval: 1m30s
  failsafeInboundHostPorts: [{protocol: tcp, port: 22}, {protocol: udp, port: 68, net: 0.0.0.0/0}]
  iptablesMarkMask: 4294901760
  natPortRange: "32768:65535"
---
apiVersion: projectcalico.org/v3
kind: KubeControllersConfiguration
metadata: {name: default}
spec:
  etcdV3CompactionPeriod: 10m
  controllers:
    node: {reconcilerPeriod: 5m, syncLabels: Enabled, hostEndpoint: {autoCreate: Disabled}}
    policy: {reconcilerPeriod: 5m}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node1-k8s-pod-eth0, namespace: default}
spec:
  node: node1
  ipNetworks: [10.0.0.5/32]
  ipNATs: [{internalIP: 10.0.0.5, externalIP: 172.16.0.5}]
  ports: [{name: http, protocol: TCP, port: 80, hostPort: 8080, hostIP: 1.2.3.4}]
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: f}
spec:
  exportV4: [{action: Accept, matchOperator: In, cidr: 77.0.0.0/16, prefixLength: {min: 24}}]
---
apiVersion: projectcalico.org/v3
kind: IPAMConfiguration
metadata: {name: default}
spec: {strictAffinity: true, maxBlocksPerHost: 4, autoAllocateBlocks: false}
`

// TestDecodeCommentOnlyFirstDocument checks that a multi-document file
// whose first document holds only comments is refused, as Calico's
// calicoctl refuses it, while a leading "---" and comments inside a
// document are fine.
func TestDecodeCommentOnlyFirstDocument(t *testing.T) {
	const doc = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\n"
	_, err := Decode([]byte("# pools for team a\n# (owned by netops)\n---\n" + doc))
	want := `document 1 (lines 1-2) holds only comments: Calico's calicoctl refuses a file whose first document has no resource; put the comment in the next document or drop the "---" after it`
	if err == nil || err.Error() != want {
		t.Errorf("comment-only first document: %v, want %s", err, want)
	}
	for _, in := range []string{"---\n" + doc, "# a comment\n" + doc, doc + "---\n# trailing\n", "# only a comment\n"} {
		if _, err := Decode([]byte(in)); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}
