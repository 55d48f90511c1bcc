package commands_test

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// TestBadInput runs each bad input against a store holding pool "a"
// (10.0.0.0/16) and checks the message, the exit code, and that nothing
// in the datastore changed.
func TestBadInput(t *testing.T) {
	c := newCluster(t)
	c.mustRun(t, poolDoc("a", "10.0.0.0/16"), "create", "-f", "-")
	dir := t.TempDir()
	cfgK8s := writeFile(t, dir, "k8s.cfg", "apiVersion: projectcalico.org/v3\nkind: CalicoAPIConfig\nspec:\n  datastoreType: kubernetes\n")
	cases := []struct {
		name   string
		args   []string
		stdin  string
		env    []string
		stderr string
	}{
		{"malformed yaml", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16") + "---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: c\n spec: [\n", nil, "line"},
		{"unknown kind", []string{"create", "-f", "-"}, "apiVersion: projectcalico.org/v3\nkind: Frobnicator\nmetadata:\n  name: x\n", nil, "Frobnicator"},
		{"unknown field", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16") + "---\n" + strings.Replace(poolDoc("c", "10.2.0.0/16"), "cidr:", "cidrr:", 1), nil, "cidrr"},
		{"wrong type", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16") + "  natOutgoing: sometimes\n", nil, "natOutgoing"},
		{"invalid value", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16") + "---\n" + poolDoc("c", "10.2.0.0/33"), nil, "10.2.0.0/33"},
		{"missing name", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16") + "---\napiVersion: projectcalico.org/v3\nkind: IPPool\nspec:\n  cidr: 10.3.0.0/16\n", nil, "metadata.name is required"},
		{"namespace on cluster kind", []string{"apply", "-f", "-"}, strings.Replace(poolDoc("b", "10.1.0.0/16"), "  name: b\n", "  name: b\n  namespace: prod\n", 1), nil, "namespace should not be specified for a non-namespaced resource. IPPool is not a namespaced resource"},
		{"namespace mismatch", []string{"apply", "-n", "prod", "-f", "-"}, "apiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata:\n  name: s\n  namespace: dev\n", nil, "resource namespace does not match client namespace. dev != prod"},
		{"empty input", []string{"apply", "-f", "-"}, "# nothing here\n", nil, "No resources specified in file stdin"},
		{"missing file", []string{"apply", "-f", dir + "/nope.yaml"}, "", nil, "nope.yaml"},
		{"conflict", []string{"replace", "-f", "-"}, strings.Replace(poolDoc("a", "10.0.0.0/16"), "  name: a\n", "  name: a\n  resourceVersion: \"1\"\n", 1), nil, "update conflict: IPPool(a)"},
		{"already exists", []string{"create", "-f", "-"}, poolDoc("a", "10.0.0.0/16"), nil, "resource already exists: IPPool(a)"},
		{"overlap", []string{"create", "-f", "-"}, poolDoc("b", "10.0.0.0/8"), nil, `IPPool "b" (10.0.0.0/8) overlaps IPPool "a" (10.0.0.0/16)`},
		{"not found", []string{"delete", "ippool", "pool-x"}, "", nil, "resource does not exist: IPPool(pool-x) with error: "},
		{"unknown kind by name", []string{"delete", "frobs", "x"}, "", nil, "resource type 'frobs' is not supported"},
		{"unsupported datastore env", []string{"get", "ippools"}, "", []string{"DATASTORE_TYPE=kubernetes"}, `datastore type "kubernetes" is not supported`},
		{"unsupported datastore file", []string{"get", "ippools", "-c", cfgK8s}, "", nil, `datastore type "kubernetes" is not supported`},
		{"missing config file", []string{"get", "ippools", "--config", dir + "/none.cfg"}, "", nil, "none.cfg"},
		{"unreachable", []string{"apply", "-f", "-"}, poolDoc("b", "10.1.0.0/16"), []string{"ETCD_ENDPOINTS=http://127.0.0.1:1"}, "etcd at http://127.0.0.1:1"},
		{"bad label", []string{"label", "ippool", "a", "novalue"}, "", nil, "invalid label novalue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.dump(t)
			start := time.Now()
			r := c.run(t, tc.stdin, tc.env, tc.args...)
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("took %s, want a prompt failure", took)
			}
			if r.code != 1 {
				t.Errorf("exit code %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.stderr)
			}
			if after := c.dump(t); !maps.Equal(before, after) {
				t.Errorf("the datastore changed: before %v, after %v", slices(before), slices(after))
			}
		})
	}
}
