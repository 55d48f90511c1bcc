package commands_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// storedPool reads one pool back as its JSON object.
func storedPool(t *testing.T, c *cluster, name string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(c.mustRun(t, "", "get", "ippool", name, "-o", "json")), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// at follows keys through nested objects.
func at(obj map[string]any, keys ...string) any {
	var cur any = obj
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// TestPatchTypes checks the three patch types against one pool: the
// strategic merge default (metadata lists merged, directives honoured), a
// JSON merge patch and a JSON patch, each with what it must refuse.
func TestPatchTypes(t *testing.T) {
	c := newCluster(t)
	c.mustRun(t, `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: p, labels: {rack: r1, zone: z1}, finalizers: [example.com/a]}
spec: {cidr: 10.0.0.0/16, natOutgoing: true}
`, "apply", "-f", "-")
	steps := []struct {
		name  string
		args  []string
		err   string // stderr substring when it must fail
		path  []string
		want  any
		path2 []string
		want2 any
	}{
		{"strategic is the default", []string{"-p", `{"spec":{"disabled":true}}`}, "",
			[]string{"spec", "disabled"}, true, []string{"spec", "natOutgoing"}, true},
		{"strategic merges finalizers", []string{"-p", `{"metadata":{"finalizers":["example.com/b"]}}`}, "",
			[]string{"metadata", "finalizers"}, []any{"example.com/b", "example.com/a"}, nil, nil},
		{"merge replaces finalizers", []string{"--type", "merge", "-p", `{"metadata":{"finalizers":["example.com/c"]}}`}, "",
			[]string{"metadata", "finalizers"}, []any{"example.com/c"}, nil, nil},
		{"merge removes with null", []string{"-t", "merge", "-p", `{"metadata":{"labels":{"zone":null}}}`}, "",
			[]string{"metadata", "labels"}, map[string]any{"rack": "r1"}, nil, nil},
		{"strategic $patch replace", []string{"--type", "strategic", "-p", `{"spec":{"$patch":"replace","cidr":"10.0.0.0/16","blockSize":26}}`}, "",
			[]string{"spec", "disabled"}, nil, []string{"spec", "natOutgoing"}, nil},
		{"json add", []string{"--type", "json", "-p", `[{"op":"add","path":"/spec/natOutgoing","value":true},{"op":"add","path":"/metadata/labels/zone","value":"z2"}]`}, "",
			[]string{"spec", "natOutgoing"}, true, []string{"metadata", "labels", "zone"}, "z2"},
		{"json remove", []string{"--type", "json", "-p", `[{"op":"remove","path":"/metadata/labels/rack"}]`}, "",
			[]string{"metadata", "labels"}, map[string]any{"zone": "z2"}, nil, nil},
		{"json test fails, nothing written", []string{"--type", "json", "-p", `[{"op":"test","path":"/spec/cidr","value":"10.9.0.0/16"},{"op":"add","path":"/spec/disabled","value":true}]`},
			"applying the JSON patch: testing value /spec/cidr failed", []string{"spec", "disabled"}, nil, nil, nil},
		{"json replace of an absent field", []string{"--type", "json", "-p", `[{"op":"replace","path":"/spec/disabled","value":true}]`},
			"applying the JSON patch: replace operation does not apply: doc is missing key: /spec/disabled", []string{"spec", "disabled"}, nil, nil, nil},
		{"json patch that is an object", []string{"--type", "json", "-p", `{"spec":{}}`},
			"a JSON patch must be a JSON list of operations", nil, nil, nil, nil},
		{"merge patch that is a list", []string{"--type", "merge", "-p", `[]`},
			"a merge patch must be a JSON object", nil, nil, nil, nil},
		{"json patch into an immutable field", []string{"--type", "json", "-p", `[{"op":"replace","path":"/spec/cidr","value":"10.1.0.0/16"}]`},
			"spec.cidr is immutable", []string{"spec", "cidr"}, "10.0.0.0/16", nil, nil},
		{"strategic patch of an unknown field", []string{"-p", `{"spec":{"colour":{"r":1}}}`},
			`unknown field "spec.colour"`, nil, nil, nil, nil},
		{"unknown type", []string{"--type", "apply", "-p", `{}`},
			`patch type "apply" is not supported: use strategic (the default), merge or json`, nil, nil, nil, nil},
	}
	for _, s := range steps {
		r := c.run(t, "", nil, append([]string{"patch", "ippool", "p"}, s.args...)...)
		switch {
		case s.err == "" && (r.code != 0 || r.stdout != "Successfully patched 1 'IPPool' resource\n"):
			t.Fatalf("%s: exit %d, stdout %q, stderr %s", s.name, r.code, r.stdout, r.stderr)
		case s.err != "" && (r.code != 1 || !strings.Contains(r.stderr, s.err)):
			t.Fatalf("%s: exit %d, stderr %q, want it to contain %q", s.name, r.code, r.stderr, s.err)
		}
		obj := storedPool(t, c, "p")
		for _, check := range []struct {
			path []string
			want any
		}{{s.path, s.want}, {s.path2, s.want2}} {
			if check.path == nil {
				continue
			}
			if got := at(obj, check.path...); !reflect.DeepEqual(got, check.want) {
				t.Errorf("%s: %s is %#v, want %#v", s.name, strings.Join(check.path, "."), got, check.want)
			}
		}
	}
}
