package selector

import "fmt"

// maxDepth bounds the nesting of parentheses so that hostile input cannot
// exhaust the stack of the parser or the evaluator.
const maxDepth = 100

// ParseError reports why and where a selector failed to parse.
type ParseError struct {
	Selector string // the text given to Parse
	Pos      int    // byte offset of the problem in Selector
	Msg      string // what was wrong there
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("selector %q: at position %d: %s", e.Selector, e.Pos, e.Msg)
}

// Parse parses a selector. The empty (or all blank) selector is all().
func Parse(s string) (*Selector, error) {
	root, err := parse(s)
	if err != nil {
		return nil, err
	}
	return newSelector(root), nil
}

// MustParse is Parse for selectors known to be valid, such as constants
// and test fixtures; it panics on a parse error.
func MustParse(s string) *Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// Validate reports whether s is a valid selector, with the same error Parse
// would return.
func Validate(s string) error {
	_, err := parse(s)
	return err
}

// parser is a recursive-descent parser over the tokens of one selector.
//
//	or      = and { "||" and }
//	and     = unary { "&&" unary }
//	unary   = { "!" } primary
//	primary = has | "all()" | "global()" | "(" or ")" | label op operand
type parser struct {
	src    string
	tokens []token
	depth  int
}

func parse(s string) (*node, error) {
	tokens, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := parser{src: s, tokens: tokens}
	if p.peek().kind == tokEOF {
		return &node{kind: kindAll}, nil
	}
	root, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errorf(t.pos, `expected "&&", "||" or end of selector, found %s`, t.describe())
	}
	return root, nil
}

func (p *parser) peek() token { return p.tokens[0] }

// next consumes and returns the current token; the final tokEOF is never
// consumed.
func (p *parser) next() token {
	t := p.tokens[0]
	if t.kind != tokEOF {
		p.tokens = p.tokens[1:]
	}
	return t
}

func (p *parser) parseOr() (*node, error) {
	return p.parseJoined(kindOr, tokOr, p.parseAnd)
}

func (p *parser) parseAnd() (*node, error) {
	return p.parseJoined(kindAnd, tokAnd, p.parseUnary)
}

// parseJoined parses one or more operands separated by the op token.
func (p *parser) parseJoined(k kind, op tokenKind, operand func() (*node, error)) (*node, error) {
	var operands []*node
	for {
		n, err := operand()
		if err != nil {
			return nil, err
		}
		operands = append(operands, n)
		if p.peek().kind != op {
			return join(k, operands), nil
		}
		p.next()
	}
}

// parseUnary parses a primary term behind any number of "!".
func (p *parser) parseUnary() (*node, error) {
	negated := false
	for p.peek().kind == tokNot {
		p.next()
		negated = !negated
	}
	n, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	if negated {
		n = negate(n)
	}
	return n, nil
}

func (p *parser) parsePrimary() (*node, error) {
	t := p.next()
	switch t.kind {
	case tokHas:
		return &node{kind: kindHas, key: t.text}, nil
	case tokAll:
		return &node{kind: kindAll}, nil
	case tokGlobal:
		return &node{kind: kindGlobal}, nil
	case tokLabel:
		return p.parseComparison(t)
	case tokLParen:
		return p.parseGroup(t)
	case tokEOF:
		return nil, p.errorf(t.pos, "expected an expression")
	}
	return nil, p.errorf(t.pos, "expected an expression, found %s", t.describe())
}

// parseGroup parses the rest of a parenthesised expression opened by open.
func (p *parser) parseGroup(open token) (*node, error) {
	if p.depth >= maxDepth {
		return nil, p.errorf(open.pos, "parentheses nested deeper than %d", maxDepth)
	}
	p.depth++
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	p.depth--
	if t := p.next(); t.kind != tokRParen {
		return nil, p.errorf(t.pos, `expected ")" to close "(" at position %d, found %s`, open.pos, t.describe())
	}
	return n, nil
}

// comparisons maps the operator tokens that take a single string.
var comparisons = map[tokenKind]kind{
	tokEq:         kindEq,
	tokNe:         kindNe,
	tokContains:   kindContains,
	tokStartsWith: kindStartsWith,
	tokEndsWith:   kindEndsWith,
}

// parseComparison parses the operator and operand after a label key.
func (p *parser) parseComparison(label token) (*node, error) {
	op := p.next()
	if k, ok := comparisons[op.kind]; ok {
		v := p.next()
		if v.kind != tokString {
			return nil, p.errorf(v.pos, "expected a quoted string after %s, found %s", op.describe(), v.describe())
		}
		return newComparison(k, label.text, v.text, nil), nil
	}
	k := kindIn
	switch op.kind {
	case tokIn:
	case tokNotIn:
		k = kindNotIn
	default:
		// The lexer rejects words after a label, but punctuation such as
		// "&&" or the end of the selector can still follow one.
		return nil, p.errorf(op.pos, "%s after label %q, found %s", expectedOperator, label.text, op.describe())
	}
	set, err := p.parseSet(op)
	if err != nil {
		return nil, err
	}
	return newComparison(k, label.text, "", set), nil
}

// parseSet parses a set literal such as {'a', "b"}; like Calico it allows
// a trailing comma.
func (p *parser) parseSet(op token) ([]string, error) {
	if t := p.next(); t.kind != tokLBrace {
		return nil, p.errorf(t.pos, `expected "{" after %s, found %s`, op.describe(), t.describe())
	}
	set := []string{}
	for {
		t := p.next()
		switch t.kind {
		case tokRBrace:
			return set, nil
		case tokString:
			set = append(set, t.text)
		default:
			return nil, p.errorf(t.pos, `expected a quoted string or "}" in set, found %s`, t.describe())
		}
		switch t = p.next(); t.kind {
		case tokRBrace:
			return set, nil
		case tokComma:
		default:
			return nil, p.errorf(t.pos, `expected "," or "}" in set, found %s`, t.describe())
		}
	}
}

func (p *parser) errorf(pos int, format string, args ...any) error {
	return &ParseError{Selector: p.src, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}
