package selector

import (
	"crypto/sha256"
	"encoding/base64"
)

// idHashBytes is how much of the SHA-224 of the canonical form goes into a
// UniqueID: 16 bytes make 22 base64 characters, so "s:" + hash is 24
// characters and "cali40" + UniqueID fits the 31-character ipset name limit.
const idHashBytes = 16

// Labels is a set of labels a selector can be evaluated against.
type Labels interface {
	// Get returns the value of the label key and whether it is present.
	Get(key string) (value string, present bool)
}

// MapLabels adapts a plain map to Labels.
type MapLabels map[string]string

// Get implements Labels.
func (m MapLabels) Get(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

// Selector is a parsed selector. It is immutable and safe for concurrent
// use.
type Selector struct {
	root      *node
	canonical string
	id        string
}

func newSelector(root *node) *Selector {
	c := canonical(root)
	sum := sha256.Sum224([]byte(c))
	return &Selector{
		root:      root,
		canonical: c,
		id:        "s:" + base64.RawURLEncoding.EncodeToString(sum[:idHashBytes]),
	}
}

// Evaluate reports whether the selector matches labels; a nil map has no
// labels. It does not allocate.
func (s *Selector) Evaluate(labels map[string]string) bool {
	return s.root.evalMap(labels)
}

// EvaluateLabels reports whether the selector matches labels; nil has no
// labels.
func (s *Selector) EvaluateLabels(labels Labels) bool {
	if labels == nil {
		return s.root.evalMap(nil)
	}
	return s.root.evalLabels(labels)
}

// String returns the canonical form of the selector: selectors that differ
// only in spacing, quoting, the order or repetition of set values, redundant
// parentheses or double negation share it, and parsing it gives it back.
func (s *Selector) String() string {
	return s.canonical
}

// UniqueID returns a short, stable identifier of the canonical form:
// "s:" followed by 22 URL-safe base64 characters of its SHA-224.
func (s *Selector) UniqueID() string {
	return s.id
}

// RequiredKey returns a label key that every label set the selector
// matches has, or "" when there is none (all(), a negation, an ||, or a
// != / not in comparison, which hold when the label is absent). An index
// may try the selector only on label sets with that key.
func (s *Selector) RequiredKey() string { return requiredKey(s.root) }

func requiredKey(n *node) string {
	switch n.kind {
	case kindHas, kindEq, kindIn, kindContains, kindStartsWith, kindEndsWith:
		return n.key
	case kindAnd:
		for _, op := range n.operands {
			if k := requiredKey(op); k != "" {
				return k
			}
		}
	}
	return ""
}

// IsGlobal reports whether the whole selector is global(). As a
// namespaceSelector that means "non-namespaced resources only", a meaning
// the policy layer gives it; Evaluate treats global() like all().
func (s *Selector) IsGlobal() bool {
	return s.root.kind == kindGlobal
}
