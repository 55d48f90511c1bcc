package selector

import (
	"regexp"
	"testing"
)

func TestCanonicalRoundTrip(t *testing.T) {
	inputs := []string{
		"", "all()", "global()", "!all()", "a == 'x'", `a == 'say "hi"'`, "a in {'y', 'x'}",
		"a not in {}", "!a == 'x'", "!!has(a)", "(has(a) || has(b)) && !(c starts with 'x')",
		"has(a) || has(b) && has(c)", "!(has(a) && (b ends with 'z' || c contains 'q'))",
		"projectcalico.org/namespace == 'default' && has(app.kubernetes.io/name)",
	}
	for _, in := range inputs {
		first := MustParse(in)
		again, err := Parse(first.String())
		if err != nil {
			t.Errorf("Parse(%q) of the canonical form of %q: %v", first.String(), in, err)
			continue
		}
		if again.String() != first.String() {
			t.Errorf("canonical form of %q is not stable: %q then %q", in, first.String(), again.String())
		}
		if again.UniqueID() != first.UniqueID() {
			t.Errorf("UniqueID of %q changed on re-parse: %s then %s", in, first.UniqueID(), again.UniqueID())
		}
	}
}

func TestEquivalentSpellingsShareCanonicalAndID(t *testing.T) {
	groups := [][]string{
		{`a == "x" && has(b)`, "a=='x'&&has(b)", "  a  ==  'x'  &&  has( b ) ", "(a == 'x') && (has(b))"},
		{`a in {"x", "y"}`, "a in {'y','x'}", "a in {'x', 'y', 'x',}", `a in{"y" , 'x'}`},
		{`a not in {"x"}`, "a notin {'x'}", "a not\tin {'x'}"},
		{`a starts with "p"`, "a startswith 'p'", "a starts  with 'p'"},
		{"has(a)", "!!has(a)", "!(!has(a))", "((has(a)))"},
		{"all()", "", "   ", "all( )"},
		{"has(a) && has(b) && has(c)", "(has(a) && has(b)) && has(c)", "has(a) && (has(b) && has(c))"},
	}
	for _, g := range groups {
		want := MustParse(g[0])
		for _, in := range g[1:] {
			got := MustParse(in)
			if got.String() != want.String() {
				t.Errorf("Parse(%q).String() = %q, want %q as for %q", in, got.String(), want.String(), g[0])
			}
			if got.UniqueID() != want.UniqueID() {
				t.Errorf("Parse(%q).UniqueID() = %s, want %s as for %q", in, got.UniqueID(), want.UniqueID(), g[0])
			}
		}
	}
}

func TestUniqueIDDiffersAcrossSelectors(t *testing.T) {
	distinct := []string{
		"all()", "global()", "!all()", "has(a)", "!has(a)", "has(b)", "a == 'x'", "a != 'x'",
		"a == 'y'", "b == 'x'", "a in {'x'}", "a not in {'x'}", "a in {'x', 'y'}", "a contains 'x'",
		"a starts with 'x'", "a ends with 'x'", "has(a) && has(b)", "has(a) || has(b)",
		"has(b) && has(a)", "(has(a) || has(b)) && has(c)", "has(a) || has(b) && has(c)",
		"a == 'x y'", "a == 'x' && has(y)",
	}
	seen := map[string]string{}
	for _, in := range distinct {
		id := MustParse(in).UniqueID()
		if other, ok := seen[id]; ok {
			t.Errorf("%q and %q share UniqueID %s", in, other, id)
		}
		seen[id] = in
	}
}

func TestUniqueIDShape(t *testing.T) {
	shape := regexp.MustCompile(`^s:[A-Za-z0-9_-]{22}$`)
	for _, in := range []string{"", "has(a)", "a in {'x', 'y', 'z'} && !(b contains 'q') || c == 'long value'"} {
		id := MustParse(in).UniqueID()
		if !shape.MatchString(id) || len(id) > 24 {
			t.Errorf("Parse(%q).UniqueID() = %q, want s: and 22 URL-safe base64 characters", in, id)
		}
		if name := "cali40" + id; len(name) > 31 {
			t.Errorf("ipset name %q from Parse(%q) is %d characters, over 31", name, in, len(name))
		}
	}
}

// TestUniqueIDPinned guards against an accidental change of the ID scheme:
// IDs name IP sets in the kernel, so a change renames every set on upgrade.
func TestUniqueIDPinned(t *testing.T) {
	tests := []struct{ sel, id string }{
		{`a == "x"`, "s:nW2hp-A7Hdve2EXV03TSWQ"},
		{"all()", "s:yAKsl-CNoToGJvI4pNl6xQ"},
	}
	for _, tt := range tests {
		if got := MustParse(tt.sel).UniqueID(); got != tt.id {
			t.Errorf("Parse(%q).UniqueID() = %s, want %s", tt.sel, got, tt.id)
		}
	}
}
