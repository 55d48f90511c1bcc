package selector

import (
	"fmt"
	"testing"
)

// evalLabelSets are the label sets of the truth tables, in column order.
var evalLabelSets = []map[string]string{
	{},           // a absent
	{"a": "x"},   // a = x
	{"a": "y"},   // a = y
	{"a": ""},    // a present, empty
	{"a": "xyz"}, // a = xyz
	{"b": "x"},   // a absent, b present
}

func TestEvaluateTruthTables(t *testing.T) {
	const T, F = true, false
	tests := []struct {
		sel  string
		want [6]bool // absent, x, y, "", xyz, only b
	}{
		{"a == 'x'", [6]bool{F, T, F, F, F, F}},
		{"a == ''", [6]bool{F, F, F, T, F, F}},
		{"a != 'x'", [6]bool{T, F, T, T, T, T}},
		{"a != ''", [6]bool{T, T, T, F, T, T}},
		{"a in {'x', 'y'}", [6]bool{F, T, T, F, F, F}},
		{"a in {''}", [6]bool{F, F, F, T, F, F}},
		{"a in {}", [6]bool{F, F, F, F, F, F}},
		{"a not in {'x', 'y'}", [6]bool{T, F, F, T, T, T}},
		{"a not in {}", [6]bool{T, T, T, T, T, T}},
		{"a in {'0','1','2','3','4','5','6','7','8','x'}", [6]bool{F, T, F, F, F, F}},
		{"a not in {'0','1','2','3','4','5','6','7','8','x'}", [6]bool{T, F, T, T, T, T}},
		{"has(a)", [6]bool{F, T, T, T, T, F}},
		{"!has(a)", [6]bool{T, F, F, F, F, T}},
		{"a contains 'x'", [6]bool{F, T, F, F, T, F}},
		{"a contains 'y'", [6]bool{F, F, T, F, T, F}},
		{"a contains ''", [6]bool{F, T, T, T, T, F}},
		{"a starts with 'x'", [6]bool{F, T, F, F, T, F}},
		{"a starts with 'xy'", [6]bool{F, F, F, F, T, F}},
		{"a ends with 'z'", [6]bool{F, F, F, F, T, F}},
		{"a ends with 'x'", [6]bool{F, T, F, F, F, F}},
		{"a ends with ''", [6]bool{F, T, T, T, T, F}},
		{"all()", [6]bool{T, T, T, T, T, T}},
		{"", [6]bool{T, T, T, T, T, T}},
		{"global()", [6]bool{T, T, T, T, T, T}},
		{"!all()", [6]bool{F, F, F, F, F, F}},
		{"!(a == 'x')", [6]bool{T, F, T, T, T, T}},
		{"!!(a == 'x')", [6]bool{F, T, F, F, F, F}},
		{"!(a != 'x')", [6]bool{F, T, F, F, F, F}},
		{"!(a in {'x', 'y'})", [6]bool{T, F, F, T, T, T}},
		{"!(a not in {'x'})", [6]bool{F, T, F, F, F, F}},
		{"!(a contains 'x')", [6]bool{T, F, T, T, F, T}},
		{"a == 'x' || a == 'y'", [6]bool{F, T, T, F, F, F}},
		{"has(a) && a != 'x'", [6]bool{F, F, T, T, T, F}},
		{"has(a) && !has(b)", [6]bool{F, T, T, T, T, F}},
		{"!(has(a) || has(b))", [6]bool{T, F, F, F, F, F}},
		{"!has(a) && !has(b)", [6]bool{T, F, F, F, F, F}},
		{"b == 'x' || a starts with 'x' && a ends with 'z'", [6]bool{F, F, F, F, T, T}},
		{"(b == 'x' || a starts with 'x') && a ends with 'z'", [6]bool{F, F, F, F, T, F}},
		{"has(a) && has(b)", [6]bool{F, F, F, F, F, F}},
		{"has(a) || has(b)", [6]bool{F, T, T, T, T, T}},
	}
	for _, tt := range tests {
		sel := MustParse(tt.sel)
		for i, labels := range evalLabelSets {
			t.Run(fmt.Sprintf("%s/%v", tt.sel, labels), func(t *testing.T) {
				if got := sel.Evaluate(labels); got != tt.want[i] {
					t.Errorf("%q.Evaluate(%v) = %v, want %v", tt.sel, labels, got, tt.want[i])
				}
				if got := sel.EvaluateLabels(MapLabels(labels)); got != tt.want[i] {
					t.Errorf("%q.EvaluateLabels(%v) = %v, want %v", tt.sel, labels, got, tt.want[i])
				}
			})
		}
		// No labels at all behaves like the empty label set.
		if got := sel.Evaluate(nil); got != tt.want[0] {
			t.Errorf("%q.Evaluate(nil) = %v, want %v", tt.sel, got, tt.want[0])
		}
		if got := sel.EvaluateLabels(nil); got != tt.want[0] {
			t.Errorf("%q.EvaluateLabels(nil) = %v, want %v", tt.sel, got, tt.want[0])
		}
	}
}

func TestEvaluatePrefixedKeys(t *testing.T) {
	sel := MustParse("projectcalico.org/namespace == 'prod' && app.kubernetes.io/name in {'web', 'api'}")
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"projectcalico.org/namespace": "prod", "app.kubernetes.io/name": "web"}, true},
		{map[string]string{"projectcalico.org/namespace": "prod", "app.kubernetes.io/name": "db"}, false},
		{map[string]string{"namespace": "prod", "name": "web"}, false},
	}
	for _, tt := range tests {
		if got := sel.Evaluate(tt.labels); got != tt.want {
			t.Errorf("%q.Evaluate(%v) = %v, want %v", sel, tt.labels, got, tt.want)
		}
	}
}

func TestIsGlobal(t *testing.T) {
	tests := []struct {
		sel  string
		want bool
	}{
		{"global()", true},
		{"(global())", true},
		{"!!global()", true},
		{"all()", false},
		{"", false},
		{"!global()", false},
		{"global() && has(a)", false},
	}
	for _, tt := range tests {
		if got := MustParse(tt.sel).IsGlobal(); got != tt.want {
			t.Errorf("Parse(%q).IsGlobal() = %v, want %v", tt.sel, got, tt.want)
		}
	}
}

func TestEvaluateDoesNotAllocate(t *testing.T) {
	sel := MustParse(tenTermSelector)
	for _, labels := range benchLabelSets {
		if n := testing.AllocsPerRun(100, func() { sel.Evaluate(labels) }); n != 0 {
			t.Errorf("Evaluate(%v) allocates %v times per call, want 0", labels, n)
		}
		ml := MapLabels(labels)
		if n := testing.AllocsPerRun(100, func() { sel.EvaluateLabels(ml) }); n != 0 {
			t.Errorf("EvaluateLabels(%v) allocates %v times per call, want 0", labels, n)
		}
	}
}

func TestRequiredKey(t *testing.T) {
	for sel, want := range map[string]string{
		"all()":                         "",
		"has(a)":                        "a",
		"a == 'x'":                      "a",
		"a == ''":                       "a",
		"a in {'x'}":                    "a",
		"a contains 'x'":                "a",
		"a starts with 'x'":             "a",
		"a ends with 'x'":               "a",
		"a != 'x'":                      "",
		"a not in {'x'}":                "",
		"!has(a)":                       "",
		"has(a) || has(b)":              "",
		"a != 'x' && b == 'y'":          "b",
		"has(a) && has(b)":              "a",
		"!(a == 'x') && c in {'z'}":     "c",
		"(has(a) || has(b)) && !has(c)": "",
	} {
		if got := MustParse(sel).RequiredKey(); got != want {
			t.Errorf("RequiredKey(%q) = %q, want %q", sel, got, want)
		}
	}
}
