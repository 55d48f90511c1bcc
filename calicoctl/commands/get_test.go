package commands_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// fixtures are the resources the output tests print.
const fixtures = `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: pool-a
spec:
  cidr: 10.0.0.0/16
  natOutgoing: true
  vxlanMode: Always
  nodeSelector: all()
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: pool-b
spec:
  cidr: 10.1.0.0/16
  nodeSelector: rack == "r1"
  disabled: true
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: peer-global
spec:
  peerIP: 198.18.0.1
  asNumber: 64513
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: peer-node1
spec:
  node: node1
  peerIP: 198.18.0.2
  asNumber: 64514
---
apiVersion: projectcalico.org/v3
kind: Node
metadata:
  name: node1
spec:
  bgp:
    ipv4Address: 198.18.0.10/15
---
apiVersion: projectcalico.org/v3
kind: Node
metadata:
  name: node2
spec:
  bgp:
    asNumber: 64600
    ipv4Address: 198.18.0.11/15
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata:
  name: web-nets
  namespace: default
spec:
  nets:
  - 10.20.0.0/24
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata:
  name: db-nets
  namespace: prod
spec:
  nets:
  - 10.30.0.0/24
  - 10.31.0.0/24
`

// TestGetOutputs applies the fixtures and compares every output format
// with its golden file.
func TestGetOutputs(t *testing.T) {
	c := newCluster(t)
	out := c.mustRun(t, fixtures, "apply", "-f", "-")
	if want := "Successfully applied 8 resource(s)\n"; out != want {
		t.Fatalf("apply of mixed kinds printed %q, want %q", out, want)
	}
	tmplFile := writeFile(t, t.TempDir(), "nets.tmpl",
		"{{- range . }}{{ range .Items }}{{ .Namespace }}/{{ .Name }}: {{ join .Spec.Nets \", \" }}\n{{ end }}{{ end -}}\n")
	cases := []struct {
		golden string
		args   []string
	}{
		{"ippool-template.txt", []string{"get", "ippools", "-o", `go-template={{range .}}{{.Kind}}:{{"\n"}}{{range .Items}}{{.Name}} {{.Spec.CIDR}} disabled={{.Spec.Disabled}} {{joinAndTruncate .Spec.NodeSelector "" 8}}{{"\n"}}{{end}}{{end}}`}},
		{"ippool-template-named.txt", []string{"get", "ippools", "pool-b", "pool-a", "-o", `go-template={{range .}}{{.Kind}} {{.ObjectMeta.Name}} uses {{join .Spec.AllowedUses ","}}{{"\n"}}{{end}}`}},
		{"node-template-config.txt", []string{"get", "nodes", "-o", `go-template={{range .}}{{range .Items}}{{.Name}} {{.Spec.BGP.IPv4Address}} cluster AS {{config "asnumber"}}{{"\n"}}{{end}}{{end}}`}},
		{"networkset-template-file.txt", []string{"get", "networksets", "-A", "-o", "go-template-file=" + tmplFile}},
		{"ippool-ps.txt", []string{"get", "ippools"}},
		{"ippool-wide.txt", []string{"get", "ipp", "-o", "wide"}},
		{"ippool-yaml.txt", []string{"get", "IPPool", "-o", "yaml"}},
		{"ippool-one-yaml.txt", []string{"get", "pool", "pool-a", "-o", "yaml"}},
		{"ippool-two-yaml.txt", []string{"get", "pools", "pool-a", "pool-b", "-o", "yaml"}},
		{"ippool-json.txt", []string{"get", "ippool", "-o", "json"}},
		{"ippool-one-json.txt", []string{"get", "ippool", "pool-b", "-o", "json"}},
		{"ippool-name.txt", []string{"get", "ippools", "-o", "name"}},
		{"ippool-custom.txt", []string{"get", "ippools", "-o", "custom-columns=NAME,NAT,disabled"}},
		{"bgppeer-ps.txt", []string{"get", "bgppeers"}},
		{"node-ps.txt", []string{"get", "nodes"}},
		{"node-wide.txt", []string{"get", "nodes", "-o", "wide"}},
		{"networkset-default.txt", []string{"get", "networksets"}},
		{"networkset-all.txt", []string{"get", "networksets", "-A", "-o", "wide"}},
		{"networkset-prod-yaml.txt", []string{"get", "netsets", "-n", "prod", "-o", "yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			golden(t, tc.golden, c.mustRun(t, "", tc.args...))
		})
	}
}

// TestGetErrors checks what get says about names and kinds it cannot find.
func TestGetErrors(t *testing.T) {
	c := newCluster(t)
	c.mustRun(t, fixtures, "apply", "-f", "-")
	cases := []struct {
		name       string
		args       []string
		wantOut    string
		wantStderr string
	}{
		{"missing name", []string{"get", "ippool", "pool-x"}, "",
			"resource does not exist: IPPool(pool-x) with error: "},
		{"one found one missing", []string{"get", "ippool", "pool-a", "pool-x"}, "pool-a",
			"resource does not exist: IPPool(pool-x)"},
		{"unknown kind", []string{"get", "frobs"}, "", "resource type 'frobs' is not supported"},
		{"namespace on cluster kind", []string{"get", "ippools", "-n", "prod"}, "", "IPPool is not namespaced"},
		{"unknown column", []string{"get", "ippools", "-o", "custom-columns=NAME,COLOUR"}, "", `unknown column "COLOUR" for IPPool`},
		{"bad format", []string{"get", "ippools", "-o", "xml"}, "", "unrecognized output format 'xml'"},
		{"empty template", []string{"get", "ippools", "-o", "go-template="}, "", "need to specify a template"},
		{"empty template file", []string{"get", "ippools", "-o", "go-template-file="}, "", "need to specify a template file"},
		{"missing template file", []string{"get", "ippools", "-o", "go-template-file=" + filepath.Join(t.TempDir(), "none.tmpl")}, "", "none.tmpl: no such file or directory"},
		{"template parse error", []string{"get", "ippools", "-o", "go-template={{range .}}{{nope .}}{{end}}"}, "", `template: get:1: function "nope" not defined`},
		{"template execution error", []string{"get", "ippools", "-o", "go-template=partial {{range .}}{{.Nope}}{{end}}"}, "",
			`template: get:1:21: executing "get" at <.Nope>: can't evaluate field Nope in type interface {}`},
		{"template on a missing name", []string{"get", "ippool", "pool-a", "pool-x", "-o", "go-template={{range .}}{{.Name}}{{end}}"}, "pool-a",
			"resource does not exist: IPPool(pool-x)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run(t, "", nil, tc.args...)
			if r.code != 1 {
				t.Errorf("exit code %d, want 1", r.code)
			}
			if tc.wantOut == "" && r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.Contains(r.stdout, tc.wantOut) {
				t.Errorf("stdout %q does not contain %q", r.stdout, tc.wantOut)
			}
			if !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.wantStderr)
			}
		})
	}
}
