package manifests

import (
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// grants are one account's rights, one "verb group/resource[/name] [in
// namespace]" each, sorted.
type grants map[string][]string

func (g grants) add(account, verb, group, resource, namespace, name string) {
	s := verb + " " + group + "/" + resource
	if name != "" {
		s += "/" + name
	}
	if namespace != "" {
		s += " in " + namespace
	}
	g[account] = append(g[account], s)
}

func (g grants) sorted() grants {
	for a := range g {
		sort.Strings(g[a])
		g[a] = slices.Compact(g[a])
	}
	return g
}

// expandRule calls fn for every verb, group, resource and name an RBAC
// rule covers (no names: "", any name).
func expandRule(verbs, groups, resources, names []string, fn func(verb, group, resource, name string)) {
	if len(names) == 0 {
		names = []string{""}
	}
	for _, v := range verbs {
		for _, g := range groups {
			for _, res := range resources {
				for _, n := range names {
					fn(v, g, res, n)
				}
			}
		}
	}
}

// manifestGrants expands the manifest's bindings: each ServiceAccount
// subject gets every rule of the role bound to it (a Role's in its
// namespace).
func manifestGrants(t *testing.T) grants {
	objs := load(t, manifest)
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			var r rbacv1.ClusterRole
			find(t, objs, o.GetKind(), o.GetName(), &r)
			roles[o.GetKind()+"/"+o.GetName()] = r.Rules
		}
	}
	g := grants{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		find(t, objs, o.GetKind(), o.GetName(), &b)
		rules, ok := roles[b.RoleRef.Kind+"/"+b.RoleRef.Name]
		if !ok {
			t.Fatalf("%s %s binds %s %s, which the manifest does not have", o.GetKind(), o.GetName(), b.RoleRef.Kind, b.RoleRef.Name)
		}
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" {
				t.Errorf("%s %s binds a %s", o.GetKind(), o.GetName(), s.Kind)
				continue
			}
			for _, r := range rules {
				expandRule(r.Verbs, r.APIGroups, r.Resources, r.ResourceNames, func(v, gr, res, n string) {
					g.add(s.Name, v, gr, res, b.Namespace, n)
				})
			}
		}
	}
	return g.sorted()
}

// docGrants reads the table of docs/install.md's RBAC section: account
// (empty: the row above's), API group (core is ""), resources, verbs,
// namespace, name, why.
func docGrants(t *testing.T) grants {
	raw, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## RBAC\n")
	if !ok {
		t.Fatal("docs/install.md has no RBAC section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	g := grants{}
	account, rows := "", 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| account ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 7 {
			t.Fatalf("RBAC row with %d cells, want 7: %s", len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "`", ""))
		}
		if cells[0] != "" {
			account = cells[0]
		}
		group := cells[1]
		if group == "core" {
			group = ""
		}
		for _, res := range strings.Split(cells[2], ",") {
			for _, v := range strings.Split(cells[3], ",") {
				g.add(account, strings.TrimSpace(v), group, strings.TrimSpace(res), cells[4], cells[5])
			}
		}
		if cells[6] == "" {
			t.Errorf("RBAC row without a reason: %s", line)
		}
		rows++
	}
	if rows == 0 {
		t.Fatal("docs/install.md's RBAC section has no table rows")
	}
	return g.sorted()
}

// TestRBACTableMatchesManifest: docs/install.md's RBAC table lists
// exactly what the manifest's roles grant each account, no more and no
// less (TestManifests checks the grants against the code, on a real API
// server).
func TestRBACTableMatchesManifest(t *testing.T) {
	doc, man := docGrants(t), manifestGrants(t)
	for _, account := range []string{"calico-kube-controllers", "calico-node"} {
		if len(man[account]) == 0 {
			t.Errorf("the manifest grants %s nothing", account)
		}
	}
	for account := range man {
		if _, ok := doc[account]; !ok {
			doc[account] = nil
		}
	}
	for account, want := range man {
		got := doc[account]
		if !slices.Equal(got, want) {
			var missing, extra []string
			for _, s := range want {
				if !slices.Contains(got, s) {
					missing = append(missing, s)
				}
			}
			for _, s := range got {
				if !slices.Contains(want, s) {
					extra = append(extra, s)
				}
			}
			t.Errorf("%s: the RBAC table misses %v and lists %v, which the manifest does not grant", account, missing, extra)
		}
	}
	for account := range doc {
		if _, ok := man[account]; !ok {
			t.Errorf("the RBAC table lists %s, which the manifest binds nothing to", account)
		}
	}
}
