package commands_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

func poolDoc(name, cidr string) string {
	return fmt.Sprintf("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: %s\nspec:\n  cidr: %s\n", name, cidr)
}

// TestWriteCommands walks create, apply, replace, patch, label and delete
// through one store, checking each message and what is stored after.
func TestWriteCommands(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	two := writeFile(t, dir, "two.yaml", poolDoc("pool-a", "10.0.0.0/16")+"---\n"+poolDoc("pool-b", "10.1.0.0/16"))
	steps := []struct {
		name    string
		stdin   string
		args    []string
		code    int
		stdout  string // exact, when code is 0
		stderr  string // substring, when code is not 0
		getName string // after the step, `get ippool -o custom-columns=NAME,CIDR,DISABLED` must show...
		getWant string // ...this line (or, with getWant "", the pool must be absent)
	}{
		{"create", "", []string{"create", "-f", two}, 0, "Successfully created 2 'IPPool' resource(s)\n", "", "pool-a", "pool-a   10.0.0.0/16   false"},
		{"create again", "", []string{"create", "-f", two}, 1, "", "Failed to create any 'IPPool' resources: [resource already exists: IPPool(pool-a); resource already exists: IPPool(pool-b)]", "pool-b", "pool-b   10.1.0.0/16   false"},
		{"create skip exists", "", []string{"create", "-f", two, "--skip-exists"}, 0, "Successfully created 2 'IPPool' resource(s)\n", "", "pool-a", "pool-a   10.0.0.0/16   false"},
		{"apply from stdin", poolDoc("pool-c", "10.2.0.0/16"), []string{"apply", "-f", "-"}, 0, "Successfully applied 1 'IPPool' resource(s)\n", "", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"replace", poolDoc("pool-c", "10.2.0.0/16") + "  disabled: true\n", []string{"replace", "-f", "-"}, 0, "Successfully replaced 1 'IPPool' resource(s)\n", "", "pool-c", "pool-c   10.2.0.0/16   true"},
		{"replace missing", poolDoc("pool-z", "10.9.0.0/16"), []string{"replace", "-f", "-"}, 1, "", "Failed to replace 'IPPool' resource: [resource does not exist: IPPool(pool-z)", "pool-z", ""},
		{"immutable cidr", poolDoc("pool-c", "10.3.0.0/16"), []string{"apply", "-f", "-"}, 1, "", `IPPool "pool-c": spec.cidr is immutable: cannot change 10.2.0.0/16 to 10.3.0.0/16`, "pool-c", "pool-c   10.2.0.0/16   true"},
		{"patch", "", []string{"patch", "ippool", "pool-c", "-p", `{"spec":{"disabled":false}}`}, 0, "Successfully patched 1 'IPPool' resource\n", "", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"patch immutable", "", []string{"patch", "ippool", "pool-c", "-p", `{"spec":{"cidr":"10.4.0.0/16"}}`}, 1, "", "spec.cidr is immutable", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"patch unknown field", "", []string{"patch", "ippool", "pool-c", "-p", `{"spec":{"colour":"red"}}`}, 1, "", "colour", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"patch type", "", []string{"patch", "ippool", "pool-c", "-t", "yaml", "-p", `{}`}, 1, "", `patch type "yaml" is not supported`, "pool-c", "pool-c   10.2.0.0/16   false"},
		{"label", "", []string{"label", "ippool", "pool-c", "rack=r1"}, 0, "Successfully set label rack on ippool pool-c\n", "", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"label present", "", []string{"label", "ippool", "pool-c", "rack=r2"}, 1, "", "key rack is already present. please use '--overwrite'", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"label overwrite", "", []string{"label", "ippool", "pool-c", "rack=r2", "--overwrite"}, 0, "Successfully updated label rack on ippool pool-c\n", "", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"label remove", "", []string{"label", "ippool", "pool-c", "rack", "--remove"}, 0, "Successfully removed label rack from ippool pool-c\n", "", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"label remove absent", "", []string{"label", "ippool", "pool-c", "rack", "--remove"}, 1, "", "cannot remove label of ippool pool-c, key rack does not exist", "pool-c", "pool-c   10.2.0.0/16   false"},
		{"delete by name", "", []string{"delete", "ippool", "pool-c"}, 0, "Successfully deleted 1 'IPPool' resource(s)\n", "", "pool-c", ""},
		{"delete missing", "", []string{"delete", "ippool", "pool-c"}, 1, "", "Failed to delete 'IPPool' resource: resource does not exist: IPPool(pool-c) with error: ", "pool-c", ""},
		{"delete skip missing", "", []string{"delete", "ippool", "pool-c", "--skip-not-exists"}, 0, "Successfully deleted 1 'IPPool' resource(s)\n", "", "pool-c", ""},
		{"delete by file", "", []string{"delete", "-f", two}, 0, "Successfully deleted 2 'IPPool' resource(s)\n", "", "pool-a", ""},
	}
	for _, s := range steps {
		r := c.run(t, s.stdin, nil, s.args...)
		if r.code != s.code {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", s.name, r.code, s.code, r.stdout, r.stderr)
		}
		if s.code == 0 && r.stdout != s.stdout {
			t.Errorf("%s: stdout %q, want %q", s.name, r.stdout, s.stdout)
		}
		if s.code != 0 && !strings.Contains(r.stderr, s.stderr) {
			t.Errorf("%s: stderr %q does not contain %q", s.name, r.stderr, s.stderr)
		}
		table := c.mustRun(t, "", "get", "ippool", "-o", "custom-columns=NAME,CIDR,DISABLED")
		var line string
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(l, s.getName+" ") {
				line = strings.TrimRight(l, " ")
			}
		}
		if line != s.getWant {
			t.Errorf("%s: after it, %s shows as %q, want %q", s.name, s.getName, line, s.getWant)
		}
	}
}

// TestPartialApply checks Calico's report when one document of several
// fails at write time: the others are written, the failing one is not.
func TestPartialApply(t *testing.T) {
	c := newCluster(t)
	in := poolDoc("a", "10.0.0.0/16") + "---\n" + poolDoc("b", "10.1.0.0/16") + "---\n" + poolDoc("c", "10.0.1.0/24")
	r := c.run(t, in, nil, "apply", "-f", "-")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if want := "Partial success: applied the first 2 out of 3 'IPPool' resources:\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if want := `Hit error(s): [IPPool "c" (10.0.1.0/24) overlaps IPPool "a" (10.0.0.0/16)]`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not contain %q", r.stderr, want)
	}
	got := c.dump(t)
	if len(got) != 2 {
		t.Errorf("stored %d resources, want pools a and b: %v", len(got), slices(got))
	}
}

// TestDirectoryInput checks -f DIR reads every .yaml/.yml/.json file in
// name order and nothing else.
func TestDirectoryInput(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	writeFile(t, dir, "2-b.yml", poolDoc("b", "10.1.0.0/16"))
	writeFile(t, dir, "1-a.yaml", poolDoc("a", "10.0.0.0/16"))
	writeFile(t, dir, "3-c.json", `{"apiVersion":"projectcalico.org/v3","kind":"IPPoolList","items":[{"metadata":{"name":"c"},"spec":{"cidr":"10.2.0.0/16"}}]}`)
	writeFile(t, dir, "notes.txt", "not a resource")
	out := c.mustRun(t, "", "create", "-f", dir)
	if want := "Successfully created 3 'IPPool' resource(s)\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if names := c.mustRun(t, "", "get", "ippools", "-o", "name"); names != "ippool.projectcalico.org/a\nippool.projectcalico.org/b\nippool.projectcalico.org/c\n" {
		t.Errorf("stored pools: %q", names)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	c := newCluster(t)
	r := c.run(t, "", nil, "version")
	if r.code != 0 {
		t.Fatalf("version: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "version-no-clusterinfo.txt", r.stdout)
	if !strings.Contains(r.stderr, `clusterinformation "default"`) {
		t.Errorf("version stderr %q does not say why the cluster version is unknown", r.stderr)
	}
	// ClusterInformation is read-only to calicoctl: calico-node writes it.
	c.writeDirect(t, &v3.ClusterInformation{ObjectMeta: v3.ObjectMeta{Name: "default"},
		Spec: v3.ClusterInformationSpec{CalicoVersion: "v3.99.0", ClusterType: "palisade,bgp"}})
	golden(t, "version.txt", c.mustRun(t, "", "version"))
	for _, sh := range []string{"bash", "zsh"} {
		out := c.mustRun(t, "", "completion", sh)
		if !strings.Contains(out, "calicoctl") || len(out) < 1000 {
			t.Errorf("completion %s printed %d bytes without the command name", sh, len(out))
		}
	}
}

func slices(m map[string]string) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestApplyWarnsNotActedOn checks that apply names each accepted but not
// acted on field once per kind on stderr, and still applies.
func TestApplyWarnsNotActedOn(t *testing.T) {
	c := newCluster(t)
	doc := "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default, generation: 2}\nspec: {bpfEnabled: false, bpfLogLevel: Debug, wireguardThreadingEnabled: true, logSeverityScreen: Info}\n" +
		"---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n1}\nspec: {bpfEnabled: true}\n"
	r := c.run(t, doc, nil, "apply", "-f", "-", "--allow-version-mismatch")
	if r.code != 0 {
		t.Fatalf("apply: exit %d: %s", r.code, r.stderr)
	}
	want := "Warning: FelixConfiguration field metadata.generation is accepted but not acted on by Palisade (see docs/not-acted-on.md)\n" +
		"Warning: FelixConfiguration field spec.bpfLogLevel is accepted but not acted on by Palisade (see docs/not-acted-on.md)\n" +
		"Warning: FelixConfiguration field spec.wireguardThreadingEnabled is accepted but not acted on by Palisade (see docs/not-acted-on.md)\n"
	if r.stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
	}
	if r.stdout != "Successfully applied 2 'FelixConfiguration' resource(s)\n" {
		t.Errorf("stdout %q", r.stdout)
	}
}

// TestApplyWarnsIPIP checks that a pool asking for IP-in-IP (ipipMode, or
// the deprecated ipip block) is named on apply, a pool that does not is
// not, and both apply.
func TestApplyWarnsIPIP(t *testing.T) {
	c := newCluster(t)
	doc := "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: ipip}\nspec: {cidr: 10.70.0.0/16, ipipMode: CrossSubnet}\n" +
		"---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: v1}\nspec: {cidr: 10.71.0.0/16, ipip: {enabled: true}}\n" +
		"---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: plain}\nspec: {cidr: 10.72.0.0/16, ipipMode: Never, vxlanMode: Always}\n"
	r := c.run(t, doc, nil, "apply", "-f", "-", "--allow-version-mismatch")
	if r.code != 0 {
		t.Fatalf("apply: exit %d: %s", r.code, r.stderr)
	}
	want := "Warning: IPPool \"ipip\" spec.ipipMode CrossSubnet is not acted on: Palisade builds no IP-in-IP tunnels, the pool is routed without encapsulation (use vxlanMode; see docs/vxlan.md)\n" +
		"Warning: IPPool \"v1\" spec.ipipMode Always is not acted on: Palisade builds no IP-in-IP tunnels, the pool is routed without encapsulation (use vxlanMode; see docs/vxlan.md)\n"
	if r.stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
	}
	if r.stdout != "Successfully applied 3 'IPPool' resource(s)\n" {
		t.Errorf("stdout %q", r.stdout)
	}
}

// TestWriteRefusesWhatCalicoRefuses checks the kinds and names calicoctl
// will not write, with nothing written.
func TestWriteRefusesWhatCalicoRefuses(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct{ doc, want string }{
		{"kind: ClusterInformation\nmetadata: {name: default}\nspec: {}\n", "resource type 'ClusterInformation' is read-only"},
		{"kind: NetworkPolicy\nmetadata: {name: knp.default.web, namespace: a}\nspec: {}\n", "kubernetes network policies must be managed through the kubernetes API"},
	} {
		r := c.run(t, "apiVersion: projectcalico.org/v3\n"+tc.doc, nil, "apply", "-f", "-")
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "nothing was applied") {
			t.Errorf("apply %q: exit %d, stderr %q, want %q", tc.doc, r.code, r.stderr, tc.want)
		}
	}
}

// TestStagedPolicies checks that the staged policy kinds apply, are stored,
// listed and deleted.
func TestStagedPolicies(t *testing.T) {
	c := newCluster(t)
	docs := "apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: web, namespace: prod}\nspec: {selector: app == 'web', ingress: [{action: Allow}]}\n" +
		"---\napiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: deny-all}\nspec: {stagedAction: Delete}\n" +
		"---\napiVersion: projectcalico.org/v3\nkind: StagedKubernetesNetworkPolicy\nmetadata: {name: k, namespace: prod}\nspec: {podSelector: {matchLabels: {app: web}}, policyTypes: [Ingress]}\n"
	if r := c.run(t, docs, nil, "apply", "-f", "-"); r.code != 0 || r.stdout != "Successfully applied 3 resource(s)\n" {
		t.Fatalf("apply: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"get", "stagednetworkpolicy", "-n", "prod", "-o", "name"}},
		{[]string{"get", "sgnp", "-o", "name"}},
		{[]string{"get", "sknp", "-A", "-o", "name"}},
	} {
		if r := c.run(t, "", nil, tc.args...); r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %s", tc.args, r.code, r.stdout, r.stderr)
		}
	}
	r := c.run(t, "", nil, "get", "stagednetworkpolicy", "web", "-n", "prod", "-o", "yaml")
	for _, want := range []string{"stagedAction: Set", "tier: default", "projectcalico.org/tier: default"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stored staged policy lacks %q:\n%s", want, r.stdout)
		}
	}
	// Calico stores and prints a rule's empty ends, as for every policy.
	if !strings.Contains(r.stdout, "    source: {}") || !strings.Contains(r.stdout, "    destination: {}") {
		t.Errorf("stored staged policy lacks the empty rule ends Calico prints:\n%s", r.stdout)
	}
	if r := c.run(t, "", nil, "delete", "sgnp", "deny-all"); r.code != 0 {
		t.Errorf("delete: exit %d: %s", r.code, r.stderr)
	}
	if r := c.run(t, "", nil, "get", "sgnp", "-o", "name"); r.stdout != "" {
		t.Errorf("after delete: %q", r.stdout)
	}
}

// writeDirect stores r through the library client, as the components that
// own read-only kinds do.
func (c *cluster) writeDirect(t *testing.T, r v3.Resource) {
	t.Helper()
	ctx := context.Background()
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: c.endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if _, err := client.New(store).Apply(ctx, r); err != nil {
		t.Fatalf("writing %s: %v", r.GetTypeMeta().Kind, err)
	}
}

// TestTiers checks Calico's tier rules through calicoctl: a policy is
// created only in a tier that exists (or in the same file before it), and
// a tier that still holds policies, or a built-in one, is not deleted.
func TestTiers(t *testing.T) {
	c := newCluster(t)
	policy := "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: web, namespace: prod}\nspec: {tier: security, selector: all()}\n"
	tierDoc := "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: security}\nspec: {order: 100}\n"
	steps := []struct {
		name, stdin string
		args        []string
		code        int
		out         string // stdout (code 0) or stderr substring
	}{
		{"policy without its tier", policy, []string{"apply", "-f", "-"}, 1,
			`Failed to apply 'NetworkPolicy' resource: [resource does not exist: Tier(security) with error: `},
		{"policy before its tier", policy + "---\n" + tierDoc, []string{"create", "-f", "-"}, 1,
			`resource does not exist: Tier(security)`},
		{"tier then policy", tierDoc + "---\n" + policy, []string{"apply", "-f", "-"}, 0, "Successfully applied 2 resource(s)\n"},
		{"delete non-empty tier", "", []string{"delete", "tier", "security"}, 1,
			"Failed to delete 'Tier' resource: operation delete is not supported on security: Cannot delete a non-empty tier"},
		{"delete default tier", "", []string{"delete", "tier", "default"}, 1,
			"Failed to delete 'Tier' resource: operation Delete is not supported on default: Cannot delete default tier"},
		{"delete the policy", "", []string{"delete", "networkpolicy", "web", "-n", "prod"}, 0, "Successfully deleted 1 'NetworkPolicy' resource(s)\n"},
		{"delete emptied tier", "", []string{"delete", "tier", "security"}, 0, "Successfully deleted 1 'Tier' resource(s)\n"},
	}
	for _, s := range steps {
		r := c.run(t, s.stdin, nil, s.args...)
		switch {
		case r.code != s.code:
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", s.name, r.code, s.code, r.stdout, r.stderr)
		case s.code == 0 && r.stdout != s.out:
			t.Errorf("%s: stdout %q, want %q", s.name, r.stdout, s.out)
		case s.code != 0 && !strings.Contains(r.stderr, s.out):
			t.Errorf("%s: stderr %q does not contain %q", s.name, r.stderr, s.out)
		}
	}
	if got := c.dump(t); len(got) != 0 {
		t.Errorf("store holds %v, want nothing", slices(got))
	}
}
