package v3

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSeedExamples decodes, defaults and validates the Calico examples of
// testdata/seed, copied verbatim from a blog post. Each either passes or
// fails with the error a user needs to fix it.
func TestSeedExamples(t *testing.T) {
	tests := []struct {
		file    string
		kinds   []string // kinds decoded, when it decodes
		wantErr string   // exact error of Decode or Validate, "" for none
	}{
		{file: "01-ippool.yaml", kinds: []string{KindIPPool}},
		{
			// The AS number ends with a non-breaking space from the web page,
			// which YAML keeps as part of the value.
			file: "02-bgppeer.yaml",
			wantErr: `document 1 (BGPPeer "bgppeer-xenial-100-zircon"): spec.asNumber: AS number "65001\u00a0": ` +
				`want a number 0-4294967295 or dotted notation like 64512.10 (the value contains the invisible character U+00A0)`,
		},
		{file: "03-bgpconfigurationlist.yaml", kinds: []string{KindBGPConfiguration}},
		{file: "04-bgppeer.yaml", kinds: []string{KindBGPPeer}},
		{file: "05-node.yaml", kinds: []string{KindNode}},
		{file: "06-bgppeer.yaml", kinds: []string{KindBGPPeer}},
		{file: "07-bgpconfiguration.yaml", kinds: []string{KindBGPConfiguration}},
		{file: "08-bgppeer.yaml", kinds: []string{KindBGPPeer}},
		{file: "09-bgppeer.yaml", kinds: []string{KindBGPPeer}},
		{file: "10-bgpconfiguration.yaml", kinds: []string{KindBGPConfiguration}},
		{
			// A full-width colon and a missing space after a colon.
			file: "11-felixconfiguration.yaml",
			wantErr: `document 1: invalid YAML: line 60: could not find expected ':'; ` +
				`line 59 uses a full-width colon "ipipEnabled：false": write ": "; ` +
				`line 61 "ipipMTU:1440" needs a space after the colon`,
		},
		{file: "12-hostendpoint.yaml", kinds: []string{KindHostEndpoint}},
		{
			// The container ID is an unquoted number, and ipNATs holds one
			// object (with empty addresses) where a list belongs.
			file: "13-workloadendpoint.yaml",
			wantErr: `document 1 (WorkloadEndpoint "node1-k8s-frontend--5gs43-eth0"): spec.containerID: cannot use number 1.3374955569420314e+24, want string (put the value in quotes)` + "\n" +
				`document 1 (WorkloadEndpoint "node1-k8s-frontend--5gs43-eth0"): spec.ipNATs: cannot use an object, want list of objects (start each item with "- ")`,
		},
		{file: "14-ippool.yaml", kinds: []string{KindIPPool}},
		{
			file:    "15-node.yaml",
			wantErr: `document 1 (Node "node-hostname"): unknown field "spec.OrchRefs" (field names are case-sensitive: did you mean "orchRefs"?)`,
		},
		{
			// nets and notNets are scalars where lists belong, ports and
			// notPorts are the number 0 where lists of ports belong.
			file: "16-networkpolicy.yaml",
			wantErr: `document 1 (NetworkPolicy "allow-tcp-6379"): spec.ingress[0].source.nets: cannot use string "172.21.0.0/16", want list of strings` + "\n" +
				`document 1 (NetworkPolicy "allow-tcp-6379"): spec.ingress[0].source.notNets: cannot use string "172.21.0.0/16", want list of strings` + "\n" +
				`document 1 (NetworkPolicy "allow-tcp-6379"): spec.ingress[0].source.notPorts: cannot use number 0, want list of ports` + "\n" +
				`document 1 (NetworkPolicy "allow-tcp-6379"): spec.ingress[0].source.ports: cannot use number 0, want list of ports`,
		},
		{file: "17-profile.yaml", kinds: []string{KindProfile}},
		{file: "18-calicoapiconfig.yaml", kinds: []string{KindCalicoAPIConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "seed", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			rs, err := Decode(data)
			if err == nil {
				for _, r := range rs {
					Default(r)
					if verr := Validate(r); verr != nil {
						err = verr
						break
					}
				}
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Fatalf("error:\n got: %s\nwant: %s", got, tt.wantErr)
			}
			if tt.wantErr != "" {
				return
			}
			if len(rs) != len(tt.kinds) {
				t.Fatalf("decoded %d resources, want %d", len(rs), len(tt.kinds))
			}
			for i, r := range rs {
				if k := r.GetTypeMeta().Kind; k != tt.kinds[i] {
					t.Errorf("resource %d is a %s, want %s", i, k, tt.kinds[i])
				}
			}
		})
	}
}

// TestSeedNetworkPolicyOnceDecodable fixes the decoding mistakes of the seed
// NetworkPolicy by hand and checks that validation then reports what is
// still wrong with it: the single '=' of its namespace selector and ICMP
// matches on a TCP rule.
func TestSeedNetworkPolicyOnceDecodable(t *testing.T) {
	data := []byte(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: allow-tcp-6379
  namespace: production
spec:
  selector: role == 'database'
  types: [Ingress, Egress]
  ingress:
  - action: Allow
    protocol: TCP
    notProtocol: UDP
    source:
      selector: role == 'frontend'
      nets: [172.21.0.0/16]
      notNets: [172.21.0.0/16]
      namespaceSelector: env = 'dev'
      ports: [0]
      notPorts: [0]
    destination:
      ports: [6379]
    icmp: {type: 0, code: 0}
    notICMP: {type: 0, code: 0}
  egress:
  - action: Allow
`)
	rs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	Default(rs[0])
	want := `NetworkPolicy "production/allow-tcp-6379": spec.ingress[0].source.ports[0] "0": port range invalid, port number must be between 1 and 65535` + "\n" +
		`NetworkPolicy "production/allow-tcp-6379": spec.ingress[0].source.notPorts[0] "0": port range invalid, port number must be between 1 and 65535` + "\n" +
		`NetworkPolicy "production/allow-tcp-6379": spec.ingress[0].icmp: rules that specify ICMP fields must set protocol to ICMP` + "\n" +
		`NetworkPolicy "production/allow-tcp-6379": spec.ingress[0].source.namespaceSelector: selector "env = 'dev'": at position 4: expected "=="`
	if err := Validate(rs[0]); err == nil || err.Error() != want {
		t.Fatalf("error:\n got: %v\nwant: %s", err, want)
	}
}

func readSeed(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "seed", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
