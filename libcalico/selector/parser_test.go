package selector

import (
	"errors"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		name, in, canonical string
	}{
		{"empty is all", "", "all()"},
		{"blank is all", " \t", "all()"},
		{"all", "all()", "all()"},
		{"all with blanks inside", "all( )", "all()"},
		{"global", "global()", "global()"},
		{"equal single quotes", "a == 'x'", `a == "x"`},
		{"equal double quotes no spaces", `a=="x"`, `a == "x"`},
		{"not equal", "a != 'x'", `a != "x"`},
		{"empty value", "a == ''", `a == ""`},
		{"value with double quote", `a == 'say "hi"'`, `a == 'say "hi"'`},
		{"value with single quote", `a == "it's"`, `a == "it's"`},
		{"value with blanks and symbols", `a == " && || ! ( ) { } , "`, `a == " && || ! ( ) { } , "`},
		{"in", "a in {'x', 'y'}", `a in {"x", "y"}`},
		{"in sorted and deduplicated", "a in {'y','x','y'}", `a in {"x", "y"}`},
		{"in trailing comma", "a in {'x',}", `a in {"x"}`},
		{"in empty set", "a in {}", "a in {}"},
		{"not in", "a not in {'x'}", `a not in {"x"}`},
		{"notin without blank", `a notin{"x"}`, `a not in {"x"}`},
		{"not in with many blanks", "a  not \t in {'x'}", `a not in {"x"}`},
		{"contains", "a contains 'x'", `a contains "x"`},
		{"contains without blank", `a contains"x"`, `a contains "x"`},
		{"starts with", "a starts with 'x'", `a starts with "x"`},
		{"startswith", "a startswith 'x'", `a starts with "x"`},
		{"ends with", "a ends  with 'x'", `a ends with "x"`},
		{"endswith", "a endswith 'x'", `a ends with "x"`},
		{"keyword as label", "contains contains 'contains'", `contains contains "contains"`},
		{"in as label", "in in {'in'}", `in in {"in"}`},
		{"has as label", "has == 'x'", `has == "x"`},
		{"has", "has(a)", "has(a)"},
		{"has with blanks", "has( a )", "has(a)"},
		{"not has", "!has(a)", "!has(a)"},
		{"not has with blank", "! has(a)", "!has(a)"},
		{"double negation folds", "!!has(a)", "has(a)"},
		{"triple negation", "!!!has(a)", "!has(a)"},
		{"negated parenthesised negation", "!(!has(a))", "has(a)"},
		{"negated comparison binds to the term", "!a == 'x'", `!(a == "x")`},
		{"negated all", "!all()", "!all()"},
		{"prefixed key", "projectcalico.org/namespace == 'default'", `projectcalico.org/namespace == "default"`},
		{"dotted prefixed key", "has(app.kubernetes.io/name)", "has(app.kubernetes.io/name)"},
		{"key with digits dashes underscores", "k8s-app_1 == 'kube-dns'", `k8s-app_1 == "kube-dns"`},
		{"and", "a == 'x' && has(b)", `a == "x" && has(b)`},
		{"or", "a == 'x' || has(b)", `a == "x" || has(b)`},
		{"and binds tighter than or", "has(a) || has(b) && has(c)", "has(a) || has(b) && has(c)"},
		{"parenthesised or under and", "(has(a) || has(b)) && has(c)", "(has(a) || has(b)) && has(c)"},
		{"redundant parentheses dropped", "((has(a)) && (has(b)))", "has(a) && has(b)"},
		{"nested and flattened", "(has(a) && has(b)) && has(c)", "has(a) && has(b) && has(c)"},
		{"nested or flattened", "has(a) || (has(b) || has(c))", "has(a) || has(b) || has(c)"},
		{"negated group", "!(has(a) || has(b))", "!(has(a) || has(b))"},
		{"negated and", "!(a == 'x' && b in {'y'})", `!(a == "x" && b in {"y"})`},
		{"global in expression", "global() && has(a)", "global() && has(a)"},
		{"many blanks", "  a   ==  'x'   &&\thas( b )  ", `a == "x" && has(b)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := sel.String(); got != tt.canonical {
				t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.canonical)
			}
			if err := Validate(tt.in); err != nil {
				t.Errorf("Validate(%q) = %v, want nil", tt.in, err)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	const ops = "expected an operator (==, !=, in, not in, contains, starts with, ends with)"
	tests := []struct {
		name, in string
		pos      int
		msg      string
	}{
		{"dangling and", "a == 'x' &&", 11, "expected an expression"},
		{"newline between tokens", "a == 'x'\n&& has(b)", 8, `unexpected character '\n'`},
		{"carriage return between tokens", "has(a)\r", 6, `unexpected character '\r'`},
		{"label key of 513 characters", "has(" + strings.Repeat("k", 513) + ")", 4, "label key is 513 characters long, longer than the 512 allowed"},
		{"label key of 513 characters in a comparison", strings.Repeat("k", 513) + " == 'x'", 0, "label key is 513 characters long, longer than the 512 allowed"},
		{"dangling or", "has(a) ||", 9, "expected an expression"},
		{"leading and", "&& has(a)", 0, `expected an expression, found "&&"`},
		{"lone not", "!", 1, "expected an expression"},
		{"empty parentheses", "()", 1, `expected an expression, found ")"`},
		{"unclosed parenthesis", "(a == 'x'", 9, `expected ")" to close "(" at position 0, found end of selector`},
		{"unopened parenthesis", "has(a))", 6, `expected "&&", "||" or end of selector, found ")"`},
		{"two terms without operator", "a == 'x' b == 'y'", 9, `expected "&&", "||" or end of selector, found label "b"`},
		{"label alone", "a", 1, ops + ` after label "a", found end of selector`},
		{"label then label", "a b", 2, ops + ` after label "a", found 'b'`},
		{"label then and", "a && b", 2, ops + ` after label "a", found "&&"`},
		{"single equals", "a = 'x'", 2, `expected "=="`},
		{"single ampersand", "has(a) & has(b)", 7, `expected "&&"`},
		{"single pipe", "has(a) | has(b)", 7, `expected "||"`},
		{"unquoted value", "a == x", 5, `expected a quoted string after "==", found label "x"`},
		{"missing value", "a !=", 4, `expected a quoted string after "!=", found end of selector`},
		{"contains without value", "a contains {'x'}", 11, `expected a quoted string after "contains", found "{"`},
		{"unterminated single quote", "a == 'x", 5, "unterminated string"},
		{"unterminated double quote", `a == "x'`, 5, "unterminated string"},
		{"starts without with", "a starts foo 'x'", 9, `expected "with" after "starts"`},
		{"ends without with", "a ends 'x'", 7, `expected "with" after "ends"`},
		{"not without in", "a not {'x'}", 6, `expected "in" after "not"`},
		{"in without set", "a in 'x'", 5, `expected "{" after "in", found string "x"`},
		{"not in without set", "a not in 'x'", 9, `expected "{" after "not in", found string "x"`},
		{"set without comma", "a in {'x' 'y'}", 10, `expected "," or "}" in set, found string "y"`},
		{"set with lone comma", "a in {,}", 6, `expected a quoted string or "}" in set, found ","`},
		{"unclosed set", "a in {'x'", 9, `expected "," or "}" in set, found end of selector`},
		{"set with label", "a in {x}", 6, `expected a quoted string or "}" in set, found label "x"`},
		{"has without label", "has()", 4, `expected a label name in has(), found ')'`},
		{"has unclosed", "has(a", 5, `expected ")" to close "has(", found end of selector`},
		{"has with two labels", "has(a b)", 6, `expected ")" to close "has(", found 'b'`},
		{"all with argument", "all(x)", 4, `expected ")" to close "all(", found 'x'`},
		{"global with argument", "global(a)", 7, `expected ")" to close "global(", found 'a'`},
		{"non ascii", "é == 'x'", 0, "unexpected character 'é'"},
		{"stray string", "'x'", 0, `expected an expression, found string "x"`},
		{"not equal at start", "!= 'x'", 0, `expected an expression, found "!="`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want an error", tt.in, sel)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %v is a %T, want *ParseError", tt.in, err, err)
			}
			if pe.Selector != tt.in || pe.Pos != tt.pos || pe.Msg != tt.msg {
				t.Errorf("Parse(%q) error = {%q, %d, %q}, want {%q, %d, %q}",
					tt.in, pe.Selector, pe.Pos, pe.Msg, tt.in, tt.pos, tt.msg)
			}
			if verr := Validate(tt.in); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate(%q) = %v, want %v", tt.in, verr, err)
			}
		})
	}
}

func TestParseErrorText(t *testing.T) {
	_, err := Parse("a == 'x' &&")
	want := `selector "a == 'x' &&": at position 11: expected an expression`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse error = %v, want %s", err, want)
	}
}

func TestParseNestingLimit(t *testing.T) {
	deep := func(n int) string {
		s := "has(a)"
		for range n {
			s = "(" + s + ")"
		}
		return s
	}
	if _, err := Parse(deep(maxDepth)); err != nil {
		t.Errorf("Parse with %d nested parentheses: %v", maxDepth, err)
	}
	_, err := Parse(deep(maxDepth + 1))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Pos != maxDepth || pe.Msg != "parentheses nested deeper than 100" {
		t.Errorf("Parse with %d nested parentheses: error = %v, want nesting error at position %d", maxDepth+1, err, maxDepth)
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("has(a)").String(); got != "has(a)" {
		t.Errorf("MustParse(\"has(a)\").String() = %q", got)
	}
	defer func() {
		r := recover()
		err, ok := r.(error)
		var pe *ParseError
		if !ok || !errors.As(err, &pe) {
			t.Errorf("MustParse of an invalid selector panicked with %v, want a *ParseError", r)
		}
	}()
	MustParse("a ==")
}
