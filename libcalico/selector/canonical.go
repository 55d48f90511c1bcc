package selector

import "strings"

// canonical renders n in the canonical form: single spaces around binary
// operators, double quotes (single quotes for values that hold a double
// quote), sorted sets, and only the parentheses that precedence requires.
func canonical(n *node) string {
	var b strings.Builder
	writeNode(&b, n)
	return b.String()
}

func writeNode(b *strings.Builder, n *node) {
	switch n.kind {
	case kindAll:
		b.WriteString("all()")
	case kindGlobal:
		b.WriteString("global()")
	case kindHas:
		b.WriteString("has(")
		b.WriteString(n.key)
		b.WriteString(")")
	case kindEq, kindNe, kindContains, kindStartsWith, kindEndsWith:
		b.WriteString(n.key)
		b.WriteString(operatorText[n.kind])
		writeQuoted(b, n.value)
	case kindIn, kindNotIn:
		b.WriteString(n.key)
		b.WriteString(operatorText[n.kind])
		b.WriteString("{")
		for i, v := range n.set {
			if i > 0 {
				b.WriteString(", ")
			}
			writeQuoted(b, v)
		}
		b.WriteString("}")
	case kindNot:
		b.WriteString("!")
		writeOperand(b, n.operands[0], kindNot)
	case kindAnd, kindOr:
		for i, op := range n.operands {
			if i > 0 {
				b.WriteString(operatorText[n.kind])
			}
			writeOperand(b, op, n.kind)
		}
	}
}

// operatorText spells the infix operators with their surrounding spaces.
var operatorText = [...]string{
	kindEq:         " == ",
	kindNe:         " != ",
	kindIn:         " in ",
	kindNotIn:      " not in ",
	kindContains:   " contains ",
	kindStartsWith: " starts with ",
	kindEndsWith:   " ends with ",
	kindAnd:        " && ",
	kindOr:         " || ",
}

// writeOperand writes an operand of parent, parenthesised unless it binds
// at least as tightly. Under "!" only the calls (has(), all(), global())
// go bare, so that !(a == "x") never reads as (!a) == "x".
func writeOperand(b *strings.Builder, n *node, parent kind) {
	bare := false
	switch parent {
	case kindNot:
		bare = n.kind == kindHas || n.kind == kindAll || n.kind == kindGlobal
	case kindAnd:
		bare = n.kind != kindAnd && n.kind != kindOr
	case kindOr:
		bare = n.kind != kindOr
	}
	if bare {
		writeNode(b, n)
		return
	}
	b.WriteString("(")
	writeNode(b, n)
	b.WriteString(")")
}

// writeQuoted quotes a value. Selector strings have no escapes and end at
// the first matching quote, so a value never holds both kinds of quote.
func writeQuoted(b *strings.Builder, v string) {
	q := byte('"')
	if strings.IndexByte(v, '"') >= 0 {
		q = '\''
	}
	b.WriteByte(q)
	b.WriteString(v)
	b.WriteByte(q)
}
