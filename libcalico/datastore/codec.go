package datastore

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	gojson "github.com/goccy/go-json"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Codec turns resources into stored JSON values and back. It indexes the
// kind registry once, so decoding a large list costs no registry scans.
// A Codec is read-only after NewCodec and safe for concurrent use.
type Codec struct {
	byKind   map[string]v3.KindInfo
	byPlural map[string]v3.KindInfo
	byType   map[reflect.Type]v3.KindInfo
}

// NewCodec indexes every stored kind of the v3 registry.
func NewCodec() *Codec {
	c := &Codec{
		byKind:   map[string]v3.KindInfo{},
		byPlural: map[string]v3.KindInfo{},
		byType:   map[reflect.Type]v3.KindInfo{},
	}
	for _, k := range v3.Kinds() {
		if !k.Stored || k.New == nil {
			continue
		}
		c.byKind[k.Kind] = k
		c.byPlural[k.Plural] = k
		c.byType[reflect.TypeOf(k.New())] = k
	}
	return c
}

// KindOf returns the kind of r: its TypeMeta.Kind when set, otherwise the
// kind whose Go type r has.
func (c *Codec) KindOf(r v3.Resource) (v3.KindInfo, error) {
	if r == nil || reflect.ValueOf(r).IsNil() {
		return v3.KindInfo{}, fmt.Errorf("resource is nil")
	}
	if kind := r.GetTypeMeta().Kind; kind != "" {
		info, ok := c.byKind[kind]
		if !ok {
			return v3.KindInfo{}, fmt.Errorf("kind %q is not a resource kind stored in the datastore", kind)
		}
		if reflect.TypeOf(info.New()) != reflect.TypeOf(r) {
			return v3.KindInfo{}, fmt.Errorf("resource of Go type %T says it is kind %q", r, kind)
		}
		return info, nil
	}
	info, ok := c.byType[reflect.TypeOf(r)]
	if !ok {
		return v3.KindInfo{}, fmt.Errorf("Go type %T is not a resource kind stored in the datastore", r)
	}
	return info, nil
}

// KeyOf returns the key and path of r.
func (c *Codec) KeyOf(r v3.Resource) (Key, string, error) {
	info, err := c.KindOf(r)
	if err != nil {
		return Key{}, "", err
	}
	m := r.GetObjectMeta()
	k := Key{Kind: info.Kind, Namespace: m.Namespace, Name: m.Name}
	path, err := KeyPath(k)
	return k, path, err
}

// Encode copies r into a fresh object of its kind, stamps it with its
// kind, apiVersion, uid and creation time, and returns the stored JSON
// (which never carries a resourceVersion) together with that copy. r itself
// is not modified.
func (c *Codec) Encode(r v3.Resource, uid string, created v3.Time) ([]byte, v3.Resource, error) {
	info, err := c.KindOf(r)
	if err != nil {
		return nil, nil, err
	}
	k := Key{Kind: info.Kind, Namespace: r.GetObjectMeta().Namespace, Name: r.GetObjectMeta().Name}
	in, err := json.Marshal(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encoding: %w", k, err)
	}
	obj := info.New()
	if err := gojson.Unmarshal(in, obj); err != nil {
		return nil, nil, fmt.Errorf("%s: copying: %w", k, err)
	}
	tm := obj.GetTypeMeta()
	tm.Kind, tm.APIVersion = info.Kind, v3.APIVersion
	m := obj.GetObjectMeta()
	m.ResourceVersion = ""
	m.UID = uid
	m.CreationTimestamp = created
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encoding: %w", k, err)
	}
	return out, obj, nil
}

// ParseKey turns a resource path into its key and kind.
func (c *Codec) ParseKey(path string) (Key, v3.KindInfo, error) {
	rest, ok := strings.CutPrefix(path, ResourcePrefix)
	if !ok {
		return Key{}, v3.KindInfo{}, fmt.Errorf("key %q is not under %s", path, ResourcePrefix)
	}
	plural, rest, _ := strings.Cut(rest, "/")
	info, ok := c.byPlural[plural]
	if !ok {
		return Key{}, v3.KindInfo{}, fmt.Errorf("key %q: %q is not the plural of a stored kind", path, plural)
	}
	k, err := keyFromParts(path, info, strings.Split(rest, "/"))
	return k, info, err
}

// Decode turns a stored value into a typed resource whose
// metadata.resourceVersion is modRevision. The value must be the resource
// the key names: JSON of the kind's type whose kind, apiVersion, name and
// namespace are the key's; anything else fails with a *BadValueError (so
// that, say, an IPPool stored under a GlobalNetworkPolicy key is refused
// rather than read as an empty policy). A key of no stored kind fails with
// a plain error.
func (c *Codec) Decode(path string, value []byte, modRevision int64) (v3.Resource, error) {
	k, info, err := c.ParseKey(path)
	if err != nil {
		return nil, err
	}
	return c.decodeKind(info, k, path, value, modRevision)
}

// DecodeKind is Decode for callers that already know the kind of every
// path they decode (a List of one kind), skipping the kind lookup.
func (c *Codec) DecodeKind(info v3.KindInfo, path string, value []byte, modRevision int64) (v3.Resource, error) {
	rest, ok := strings.CutPrefix(path, ResourcePrefix+info.Plural+"/")
	if !ok {
		return nil, fmt.Errorf("key %q is not a %s key", path, info.Kind)
	}
	k, err := keyFromParts(path, info, strings.Split(rest, "/"))
	if err != nil {
		return nil, err
	}
	return c.decodeKind(info, k, path, value, modRevision)
}

func (c *Codec) decodeKind(info v3.KindInfo, k Key, path string, value []byte, modRevision int64) (v3.Resource, error) {
	bad := func(format string, args ...any) error {
		return &BadValueError{Key: k, Path: path, Revision: modRevision, Reason: fmt.Errorf(format, args...)}
	}
	obj := info.New()
	tm := obj.GetTypeMeta()
	tm.Kind, tm.APIVersion = "", ""
	// Stored values are decoded with goccy/go-json: it reads the same
	// JSON into the same types about three times faster than
	// encoding/json, and decoding is most of the cost of a large List.
	// Writes keep encoding/json, whose omitzero support shapes the output.
	if err := gojson.Unmarshal(value, obj); err != nil {
		return nil, bad("decoding: %w", err)
	}
	m := obj.GetObjectMeta()
	switch {
	case tm.Kind != info.Kind:
		return nil, bad("it says kind %q, not %s", tm.Kind, info.Kind)
	case tm.APIVersion != v3.APIVersion:
		return nil, bad("it says apiVersion %q, not %s", tm.APIVersion, v3.APIVersion)
	case m.Name != k.Name:
		return nil, bad("its metadata.name %q is not the key's %q", m.Name, k.Name)
	case m.Namespace != k.Namespace:
		return nil, bad("its metadata.namespace %q is not the key's %q", m.Namespace, k.Namespace)
	}
	m.ResourceVersion = strconv.FormatInt(modRevision, 10)
	return obj, nil
}

// ParseRevision reads a resourceVersion or revision string; empty is 0.
func ParseRevision(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("revision %q is not a non-negative decimal number", s)
	}
	return n, nil
}
