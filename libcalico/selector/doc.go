// Package selector parses and evaluates Calico's label selector language.
//
// A selector is a boolean expression over a set of labels (string keys to
// string values), written the way projectcalico.org/v3 resources write it:
//
//	k == 'v'            the label k is present and equal to v
//	k != 'v'            k is absent, or present with another value
//	k in {'a', 'b'}     k is present with one of the values
//	k not in {'a'}      k is absent, or present with none of the values
//	k contains 's'      k is present and its value contains s
//	k starts with 's'   k is present and its value begins with s
//	k ends with 's'     k is present and its value ends with s
//	has(k)              k is present, whatever its value
//	all()               always true; the empty selector means all()
//	global()            always true here; as a namespaceSelector the policy
//	                    layer gives it the meaning "non-namespaced resources"
//
// Terms combine with ! (binds tightest), && and || (binds loosest), and
// parentheses. Strings are single- or double-quoted and have no escapes.
// Blanks (spaces, tabs, newlines) between tokens are free; as in Calico,
// "startswith", "endswith" and "notin" may be written without the blank.
// Label keys are made of letters, digits and the characters _ . / -, so
// prefixed keys such as projectcalico.org/namespace or app.kubernetes.io/name
// need no quoting.
//
// Parse turns text into an immutable *Selector, safe for concurrent use.
// Every selector has a canonical String form (normalised spacing, quoting,
// set order and parentheses) and a short UniqueID derived from it, fit to
// name an IP set.
package selector
