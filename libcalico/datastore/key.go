package datastore

import (
	"fmt"
	"reflect"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// ResourcePrefix is the root of every projectcalico.org/v3 resource key.
const ResourcePrefix = "/calico/resources/v3/projectcalico.org/"

// IPAMPrefix is the root of the IPAM keys (blocks, affinities, handles).
const IPAMPrefix = "/calico/ipam/v2/"

// Key names one resource. Namespace is empty for cluster-scoped kinds.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

// KeyOf returns the key of a resource from its metadata. The kind is
// TypeMeta.Kind, or when that is empty the kind whose Go type r has.
func KeyOf(r v3.Resource) Key {
	m := r.GetObjectMeta()
	kind := r.GetTypeMeta().Kind
	if kind == "" {
		for _, k := range v3.Kinds() {
			if k.New != nil && reflect.TypeOf(k.New()) == reflect.TypeOf(r) {
				kind = k.Kind
				break
			}
		}
	}
	return Key{Kind: kind, Namespace: m.Namespace, Name: m.Name}
}

// String names the key as errors do: `ippool "pool-a"` or
// `networkpolicy "allow-web" in namespace "default"`.
func (k Key) String() string {
	s := fmt.Sprintf("%s %q", strings.ToLower(k.Kind), k.Name)
	if k.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", k.Namespace)
	}
	return s
}

// ListOptions selects resources of one kind. An empty Namespace on a
// namespaced kind means every namespace; an empty Name means every name.
// NamePrefix, instead of Name, selects the names that start with it (in
// one namespace for a namespaced kind). An empty Kind selects every
// resource of every kind (the other fields must then be empty too).
type ListOptions struct {
	Kind       string
	Namespace  string
	Name       string
	NamePrefix string
}

// kindInfo finds a stored kind by its canonical name.
func kindInfo(kind string) (v3.KindInfo, error) {
	info, ok := v3.KindByName(kind)
	if !ok {
		return v3.KindInfo{}, fmt.Errorf("kind %q is not a known resource kind", kind)
	}
	if !info.Stored {
		return v3.KindInfo{}, fmt.Errorf("kind %q is not stored in the datastore", kind)
	}
	return info, nil
}

// checkSegment rejects names that would break the key layout.
func checkSegment(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s must not be empty", what)
	}
	if strings.Contains(s, "/") {
		return fmt.Errorf("%s %q must not contain '/'", what, s)
	}
	return nil
}

// KeyPath returns the datastore path of a resource:
// /calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>.
func KeyPath(k Key) (string, error) {
	info, err := kindInfo(k.Kind)
	if err != nil {
		return "", err
	}
	if err := checkSegment("name", k.Name); err != nil {
		return "", fmt.Errorf("%s: %w", k, err)
	}
	if !info.Namespaced {
		if k.Namespace != "" {
			return "", fmt.Errorf("%s: kind %s is cluster-scoped and takes no namespace", k, info.Kind)
		}
		return ResourcePrefix + info.Plural + "/" + k.Name, nil
	}
	if err := checkSegment("namespace", k.Namespace); err != nil {
		return "", fmt.Errorf("%s: %w", k, err)
	}
	return ResourcePrefix + info.Plural + "/" + k.Namespace + "/" + k.Name, nil
}

// ListPath returns the path that selects what opts asks for, and whether
// it is a prefix (true) or one exact key (false).
func ListPath(opts ListOptions) (path string, prefix bool, err error) {
	if opts.Kind == "" {
		if opts.Namespace != "" || opts.Name != "" || opts.NamePrefix != "" {
			return "", false, fmt.Errorf("listing by namespace or name needs a kind")
		}
		return ResourcePrefix, true, nil
	}
	info, err := kindInfo(opts.Kind)
	if err != nil {
		return "", false, err
	}
	if !info.Namespaced && opts.Namespace != "" {
		return "", false, fmt.Errorf("kind %s is cluster-scoped and takes no namespace", info.Kind)
	}
	if opts.NamePrefix != "" {
		if opts.Name != "" {
			return "", false, fmt.Errorf("%s: give a name or a name prefix, not both", strings.ToLower(info.Kind))
		}
		if strings.Contains(opts.NamePrefix, "/") {
			return "", false, fmt.Errorf("name prefix %q must not contain '/'", opts.NamePrefix)
		}
		if !info.Namespaced {
			return ResourcePrefix + info.Plural + "/" + opts.NamePrefix, true, nil
		}
		if err := checkSegment("namespace", opts.Namespace); err != nil {
			return "", false, fmt.Errorf("%s names starting %q: listing by name prefix needs a namespace", strings.ToLower(info.Kind), opts.NamePrefix)
		}
		return ResourcePrefix + info.Plural + "/" + opts.Namespace + "/" + opts.NamePrefix, true, nil
	}
	if opts.Name != "" && (!info.Namespaced || opts.Namespace != "") {
		p, err := KeyPath(Key{Kind: info.Kind, Namespace: opts.Namespace, Name: opts.Name})
		return p, false, err
	}
	if opts.Name != "" {
		return "", false, fmt.Errorf("%s %q: listing a namespaced kind by name needs a namespace", strings.ToLower(info.Kind), opts.Name)
	}
	if opts.Namespace != "" {
		if err := checkSegment("namespace", opts.Namespace); err != nil {
			return "", false, err
		}
		return ResourcePrefix + info.Plural + "/" + opts.Namespace + "/", true, nil
	}
	return ResourcePrefix + info.Plural + "/", true, nil
}

// ParseKeyPath turns a resource path back into its key. It fails on paths
// outside the resource prefix, of unknown plurals, or with the wrong number
// of segments for the kind's scope.
func ParseKeyPath(path string) (Key, error) {
	rest, ok := strings.CutPrefix(path, ResourcePrefix)
	if !ok {
		return Key{}, fmt.Errorf("key %q is not under %s", path, ResourcePrefix)
	}
	parts := strings.Split(rest, "/")
	info, ok := kindByPlural(parts[0])
	if !ok {
		return Key{}, fmt.Errorf("key %q: %q is not the plural of a stored kind", path, parts[0])
	}
	return keyFromParts(path, info, parts[1:])
}

// keyFromParts builds a key from the segments after the plural.
func keyFromParts(path string, info v3.KindInfo, parts []string) (Key, error) {
	want := 1
	if info.Namespaced {
		want = 2
	}
	if len(parts) != want {
		return Key{}, fmt.Errorf("key %q: kind %s needs %d segment(s) after %q, got %d", path, info.Kind, want, info.Plural, len(parts))
	}
	for _, p := range parts {
		if p == "" {
			return Key{}, fmt.Errorf("key %q has an empty segment", path)
		}
	}
	if info.Namespaced {
		return Key{Kind: info.Kind, Namespace: parts[0], Name: parts[1]}, nil
	}
	return Key{Kind: info.Kind, Name: parts[0]}, nil
}

// kindByPlural finds a stored kind by its plural.
func kindByPlural(plural string) (v3.KindInfo, bool) {
	for _, k := range v3.Kinds() {
		if k.Stored && k.Plural == plural {
			return k, true
		}
	}
	return v3.KindInfo{}, false
}
