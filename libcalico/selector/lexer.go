package selector

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// tokenKind is the type of a lexical token.
type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokLabel
	tokString
	tokLParen
	tokRParen
	tokLBrace
	tokRBrace
	tokComma
	tokEq
	tokNe
	tokIn
	tokNotIn
	tokContains
	tokStartsWith
	tokEndsWith
	tokNot
	tokAnd
	tokOr
	tokHas // text holds the label key
	tokAll
	tokGlobal
)

// symbols spells the fixed tokens for error messages.
var symbols = [...]string{
	tokEOF:        "end of selector",
	tokLParen:     `"("`,
	tokRParen:     `")"`,
	tokLBrace:     `"{"`,
	tokRBrace:     `"}"`,
	tokComma:      `","`,
	tokEq:         `"=="`,
	tokNe:         `"!="`,
	tokIn:         `"in"`,
	tokNotIn:      `"not in"`,
	tokContains:   `"contains"`,
	tokStartsWith: `"starts with"`,
	tokEndsWith:   `"ends with"`,
	tokNot:        `"!"`,
	tokAnd:        `"&&"`,
	tokOr:         `"||"`,
	tokAll:        `"all()"`,
	tokGlobal:     `"global()"`,
}

// token is one lexeme of a selector, with its byte offset in the source.
type token struct {
	kind tokenKind
	pos  int
	text string // label key or string literal contents
}

// describe names a token for an error message.
func (t token) describe() string {
	switch t.kind {
	case tokLabel:
		return fmt.Sprintf("label %q", t.text)
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	case tokHas:
		return fmt.Sprintf(`"has(%s)"`, t.text)
	}
	return symbols[t.kind]
}

// lexer splits a selector into tokens. Like Calico's, it is context
// sensitive: right after a label key, words such as "in" or "contains" are
// operators, never another label.
type lexer struct {
	src    string
	pos    int
	tokens []token
}

// lex returns the tokens of src, ending with a tokEOF token.
func lex(src string) ([]token, error) {
	l := lexer{src: src}
	for {
		l.skipSpace()
		if l.pos >= len(l.src) {
			l.emit(tokEOF, l.pos, "")
			return l.tokens, nil
		}
		if err := l.lexOne(); err != nil {
			return nil, err
		}
	}
}

func (l *lexer) emit(kind tokenKind, pos int, text string) {
	l.tokens = append(l.tokens, token{kind: kind, pos: pos, text: text})
}

func (l *lexer) afterLabel() bool {
	return len(l.tokens) > 0 && l.tokens[len(l.tokens)-1].kind == tokLabel
}

func (l *lexer) rest() string { return l.src[l.pos:] }

// isSpace reports whether c separates tokens: as in Calico's tokenizer,
// only spaces and tabs do; a newline outside a string is an error.
func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// MaxLabelKeyLength is the longest label key a selector may name; Calico's
// tokenizer refuses longer ones.
const MaxLabelKeyLength = 512

func (l *lexer) skipSpace() {
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
}

// lexOne reads the token starting at l.pos, which is not blank.
func (l *lexer) lexOne() error {
	start := l.pos
	c := l.src[start]
	switch c {
	case '(', ')', '{', '}', ',':
		l.pos++
		l.emit(punctuation(c), start, "")
		return nil
	case '"', '\'':
		end := strings.IndexByte(l.src[start+1:], c)
		if end < 0 {
			return l.errorf(start, "unterminated string")
		}
		l.emit(tokString, start, l.src[start+1:start+1+end])
		l.pos = start + end + 2
		return nil
	case '=':
		return l.pair('=', tokEq, `expected "=="`)
	case '&':
		return l.pair('&', tokAnd, `expected "&&"`)
	case '|':
		return l.pair('|', tokOr, `expected "||"`)
	case '!':
		if strings.HasPrefix(l.rest(), "!=") {
			l.pos += 2
			l.emit(tokNe, start, "")
		} else {
			l.pos++
			l.emit(tokNot, start, "")
		}
		return nil
	}
	if l.afterLabel() {
		return l.lexOperator()
	}
	return l.lexWord()
}

func punctuation(c byte) tokenKind {
	switch c {
	case '(':
		return tokLParen
	case ')':
		return tokRParen
	case '{':
		return tokLBrace
	case '}':
		return tokRBrace
	}
	return tokComma
}

// pair reads a two-character operator made of c twice.
func (l *lexer) pair(c byte, kind tokenKind, msg string) error {
	start := l.pos
	if l.pos+1 < len(l.src) && l.src[l.pos+1] == c {
		l.pos += 2
		l.emit(kind, start, "")
		return nil
	}
	return l.errorf(start, "%s", msg)
}

// expectedOperator lists the operators that may follow a label key.
const expectedOperator = "expected an operator (==, !=, in, not in, contains, starts with, ends with)"

// wordOperators are the operators spelled with words, in matching order
// ("not in" before "in").
var wordOperators = [...]struct {
	first, second string
	kind          tokenKind
}{
	{"contains", "", tokContains},
	{"starts", "with", tokStartsWith},
	{"ends", "with", tokEndsWith},
	{"not", "in", tokNotIn},
	{"in", "", tokIn},
}

// lexOperator reads a word operator after a label key. As in Calico, the
// two-word operators accept any blank (or none) between their words.
func (l *lexer) lexOperator() error {
	start := l.pos
	label := l.tokens[len(l.tokens)-1].text
	for _, op := range wordOperators {
		if !strings.HasPrefix(l.rest(), op.first) {
			continue
		}
		l.pos += len(op.first)
		if op.second != "" {
			l.skipSpace()
			if !strings.HasPrefix(l.rest(), op.second) {
				return l.errorf(l.pos, "expected %q after %q", op.second, op.first)
			}
			l.pos += len(op.second)
		}
		l.emit(op.kind, start, "")
		return nil
	}
	return l.errorf(start, "%s after label %q, found %s", expectedOperator, label, l.quoteChar(start))
}

// lexWord reads a function call (has, all, global) or a label key.
func (l *lexer) lexWord() error {
	start := l.pos
	switch {
	case strings.HasPrefix(l.rest(), "has("):
		l.pos += len("has(")
		l.skipSpace()
		keyStart := l.pos
		key := l.scanKey()
		if key == "" {
			return l.errorf(l.pos, "expected a label name in has(), found %s", l.quoteChar(l.pos))
		}
		if err := l.checkKeyLength(keyStart, key); err != nil {
			return err
		}
		if err := l.closeCall("has("); err != nil {
			return err
		}
		l.emit(tokHas, start, key)
		return nil
	case strings.HasPrefix(l.rest(), "all("):
		l.pos += len("all(")
		if err := l.closeCall("all("); err != nil {
			return err
		}
		l.emit(tokAll, start, "")
		return nil
	case strings.HasPrefix(l.rest(), "global("):
		l.pos += len("global(")
		if err := l.closeCall("global("); err != nil {
			return err
		}
		l.emit(tokGlobal, start, "")
		return nil
	}
	if key := l.scanKey(); key != "" {
		if err := l.checkKeyLength(start, key); err != nil {
			return err
		}
		l.emit(tokLabel, start, key)
		return nil
	}
	return l.errorf(start, "unexpected character %s", l.quoteChar(start))
}

// closeCall consumes optional blanks and the ")" that ends a call.
func (l *lexer) closeCall(call string) error {
	l.skipSpace()
	if l.pos < len(l.src) && l.src[l.pos] == ')' {
		l.pos++
		return nil
	}
	return l.errorf(l.pos, "expected \")\" to close %q, found %s", call, l.quoteChar(l.pos))
}

// scanKey consumes and returns the label key at l.pos, or "" if none.
func (l *lexer) scanKey() string {
	start := l.pos
	for l.pos < len(l.src) && isKeyChar(l.src[l.pos]) {
		l.pos++
	}
	return l.src[start:l.pos]
}

// checkKeyLength refuses a label key longer than MaxLabelKeyLength.
func (l *lexer) checkKeyLength(start int, key string) error {
	if len(key) > MaxLabelKeyLength {
		return l.errorf(start, "label key is %d characters long, longer than the %d allowed", len(key), MaxLabelKeyLength)
	}
	return nil
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == '-'
}

// quoteChar names the character at pos for an error message.
func (l *lexer) quoteChar(pos int) string {
	if pos >= len(l.src) {
		return symbols[tokEOF]
	}
	r, _ := utf8.DecodeRuneInString(l.src[pos:])
	return fmt.Sprintf("%q", r)
}

func (l *lexer) errorf(pos int, format string, args ...any) error {
	return &ParseError{Selector: l.src, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}
