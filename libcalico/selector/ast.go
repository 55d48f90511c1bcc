package selector

import (
	"slices"
	"strings"
)

// kind is the type of a node in a parsed selector.
type kind uint8

const (
	kindAll kind = iota
	kindGlobal
	kindHas
	kindEq
	kindNe
	kindIn
	kindNotIn
	kindContains
	kindStartsWith
	kindEndsWith
	kindNot
	kindAnd
	kindOr
)

// linearSetMax is the largest value set searched linearly; larger sets are
// searched by bisection.
const linearSetMax = 8

// node is one term of a parsed selector. Nodes are never modified after
// parsing, so a tree may be shared between goroutines.
type node struct {
	kind     kind
	key      string   // label key of a comparison or has()
	value    string   // right-hand side of ==, !=, contains, starts/ends with
	set      []string // sorted, duplicate-free values of in / not in
	operands []*node  // one for !, two or more for && and ||
}

// evalMap evaluates n against labels held in a map. It duplicates evalLabels
// so that the common case costs a map lookup, not an interface call.
func (n *node) evalMap(labels map[string]string) bool {
	switch n.kind {
	case kindAll, kindGlobal:
		return true
	case kindNot:
		return !n.operands[0].evalMap(labels)
	case kindAnd:
		for _, op := range n.operands {
			if !op.evalMap(labels) {
				return false
			}
		}
		return true
	case kindOr:
		for _, op := range n.operands {
			if op.evalMap(labels) {
				return true
			}
		}
		return false
	}
	v, ok := labels[n.key]
	return n.test(v, ok)
}

// evalLabels evaluates n against any Labels.
func (n *node) evalLabels(labels Labels) bool {
	switch n.kind {
	case kindAll, kindGlobal:
		return true
	case kindNot:
		return !n.operands[0].evalLabels(labels)
	case kindAnd:
		for _, op := range n.operands {
			if !op.evalLabels(labels) {
				return false
			}
		}
		return true
	case kindOr:
		for _, op := range n.operands {
			if op.evalLabels(labels) {
				return true
			}
		}
		return false
	}
	v, ok := labels.Get(n.key)
	return n.test(v, ok)
}

// test applies a label comparison to the looked-up value v of n.key, with
// ok telling whether the label is present. Negative operators (!=, not in)
// hold when the label is absent; all others need it present.
func (n *node) test(v string, ok bool) bool {
	switch n.kind {
	case kindHas:
		return ok
	case kindEq:
		return ok && v == n.value
	case kindNe:
		return !ok || v != n.value
	case kindIn:
		return ok && n.setContains(v)
	case kindNotIn:
		return !ok || !n.setContains(v)
	case kindContains:
		return ok && strings.Contains(v, n.value)
	case kindStartsWith:
		return ok && strings.HasPrefix(v, n.value)
	case kindEndsWith:
		return ok && strings.HasSuffix(v, n.value)
	}
	return false
}

func (n *node) setContains(v string) bool {
	if len(n.set) <= linearSetMax {
		for _, s := range n.set {
			if s == v {
				return true
			}
		}
		return false
	}
	_, found := slices.BinarySearch(n.set, v)
	return found
}

// newComparison builds a label comparison node; set values are sorted and
// deduplicated so that equal sets print and evaluate alike.
func newComparison(k kind, key, value string, set []string) *node {
	if k == kindIn || k == kindNotIn {
		slices.Sort(set)
		set = slices.Compact(set)
		if set == nil {
			set = []string{}
		}
	}
	return &node{kind: k, key: key, value: value, set: set}
}

// negate returns !n, folding a double negation away.
func negate(n *node) *node {
	if n.kind == kindNot {
		return n.operands[0]
	}
	return &node{kind: kindNot, operands: []*node{n}}
}

// join builds an && or || node over operands, splicing in the operands of
// nested nodes of the same kind: (a && b) && c is a && b && c.
func join(k kind, operands []*node) *node {
	if len(operands) == 1 {
		return operands[0]
	}
	flat := make([]*node, 0, len(operands))
	for _, op := range operands {
		if op.kind == k {
			flat = append(flat, op.operands...)
		} else {
			flat = append(flat, op)
		}
	}
	return &node{kind: k, operands: flat}
}
