package v3

import (
	"fmt"
	"sort"
	"strings"
)

// KindInfo describes one resource kind: how it is named, stored and created.
type KindInfo struct {
	// Kind is the canonical kind, for example "IPPool".
	Kind string
	// ListKind is the kind of its list document, for example "IPPoolList".
	ListKind string
	// Plural is the lower-case plural used in datastore keys, for example
	// "ippools".
	Plural string
	// Namespaced kinds carry metadata.namespace.
	Namespaced bool
	// Aliases are the extra lower-case names calicoctl accepts (singular,
	// plural and short forms), beside the lower-case kind and plural.
	Aliases []string
	// Stored is false for kinds that never live in the datastore (for
	// example CalicoAPIConfig).
	Stored bool
	// New returns a zero resource of this kind with its TypeMeta set.
	New func() Resource
	// NewList returns an empty list of this kind with its TypeMeta set.
	NewList func() List
}

// kindRegistry maps canonical kind names to their description.
var kindRegistry = map[string]KindInfo{}

// registerKind adds a kind at package initialisation. It panics on a
// duplicate, which is a programming error.
func registerKind(k KindInfo) {
	if _, dup := kindRegistry[k.Kind]; dup {
		panic("v3: kind registered twice: " + k.Kind)
	}
	kindRegistry[k.Kind] = k
}

// Kinds returns every registered kind sorted by name.
func Kinds() []KindInfo {
	out := make([]KindInfo, 0, len(kindRegistry))
	for _, k := range kindRegistry {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// KindByName finds a kind by its exact canonical name ("IPPool").
func KindByName(kind string) (KindInfo, bool) {
	k, ok := kindRegistry[kind]
	return k, ok
}

// KindByListName finds a kind by the exact name of its list kind
// ("IPPoolList").
func KindByListName(listKind string) (KindInfo, bool) {
	for _, k := range kindRegistry {
		if k.ListKind == listKind {
			return k, true
		}
	}
	return KindInfo{}, false
}

// LookupKind resolves what a user typed (case-insensitive kind, plural or
// alias, as calicoctl accepts: "ippool", "ipPools", "pool") to a kind.
func LookupKind(name string) (KindInfo, error) {
	n := strings.ToLower(name)
	for _, k := range kindRegistry {
		if n == strings.ToLower(k.Kind) || n == k.Plural {
			return k, nil
		}
		for _, a := range k.Aliases {
			if n == a {
				return k, nil
			}
		}
	}
	return KindInfo{}, fmt.Errorf("resource type %q is not supported", name)
}
