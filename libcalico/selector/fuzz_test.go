package selector

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that its errors point inside
// the input, and that the canonical form of any selector that parses
// re-parses to itself, with the same UniqueID and the same verdict on label
// sets built from the selector's own keys and values, and that every such
// set it matches has its RequiredKey. Plain `go test` runs
// only the seeds in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %v is a %T, want *ParseError", s, err, err)
			}
			if pe.Pos < 0 || pe.Pos > len(s) || pe.Selector != s {
				t.Fatalf("Parse(%q) error %v points outside the input", s, err)
			}
			if verr := Validate(s); verr == nil || verr.Error() != err.Error() {
				t.Fatalf("Validate(%q) = %v, want %v", s, verr, err)
			}
			return
		}
		c := sel.String()
		again, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", c, s, err)
		}
		if again.String() != c {
			t.Fatalf("canonical form of %q is not stable: %q then %q", s, c, again.String())
		}
		if again.UniqueID() != sel.UniqueID() {
			t.Fatalf("UniqueID of %q changed on re-parse of %q", s, c)
		}
		for _, labels := range labelSetsFor(sel.root) {
			want := sel.Evaluate(labels)
			if got := again.Evaluate(labels); got != want {
				t.Fatalf("%q gives %v on %v but its canonical form %q gives %v", s, want, labels, c, got)
			}
			if got := sel.EvaluateLabels(MapLabels(labels)); got != want {
				t.Fatalf("%q: Evaluate(%v) = %v but EvaluateLabels = %v", s, labels, want, got)
			}
			if k := sel.RequiredKey(); want && k != "" {
				if _, ok := labels[k]; !ok {
					t.Fatalf("%q matches %v, which lacks its required key %q", s, labels, k)
				}
			}
		}
	})
}

// labelSetsFor builds label sets that exercise the keys and values n
// mentions: none, each key alone with each value, and all keys at once.
func labelSetsFor(n *node) []map[string]string {
	keys := map[string]bool{}
	values := map[string]bool{"": true, "zz-unmentioned": true}
	var walk func(*node)
	walk = func(n *node) {
		if n.key != "" {
			keys[n.key] = true
		}
		values[n.value] = true
		for _, v := range n.set {
			values[v] = true
		}
		for _, op := range n.operands {
			walk(op)
		}
	}
	walk(n)

	const maxSets = 64
	sets := []map[string]string{{}}
	for v := range values {
		all := map[string]string{}
		for k := range keys {
			all[k] = v
			if len(sets) < maxSets {
				sets = append(sets, map[string]string{k: v})
			}
		}
		sets = append(sets, all)
	}
	return sets
}
