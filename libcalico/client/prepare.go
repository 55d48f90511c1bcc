package client

import (
	"encoding/json"
	"fmt"
	"reflect"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// invalidError marks a validation failure with ErrInvalid while keeping the
// validator's own message.
type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Prepare returns a copy of r made ready to write: its kind and apiVersion
// set, the namespace checked against the kind's scope ("default" filled in
// for namespaced kinds), defaults applied and the result validated. r itself
// is not modified. Every write goes through Prepare; callers that want to
// reject a whole batch before writing any of it call it themselves first.
func (c *Client) Prepare(r v3.Resource) (v3.Resource, error) {
	if r == nil || reflect.ValueOf(r).IsNil() {
		return nil, fmt.Errorf("resource is nil")
	}
	info, err := infoOf(r)
	if err != nil {
		return nil, err
	}
	out, err := copyResource(info, r)
	if err != nil {
		return nil, err
	}
	m := out.GetObjectMeta()
	if m.Name == "" {
		return nil, &invalidError{fmt.Errorf("%s: metadata.name is required", info.Kind)}
	}
	if info.Namespaced {
		if m.Namespace == "" {
			m.Namespace = DefaultNamespace
		}
	} else if m.Namespace != "" {
		return nil, ruleErrorf(ErrScope, "%s %q: metadata.namespace %q given, but %s is not namespaced", info.Kind, m.Name, m.Namespace, info.Kind)
	}
	v3.Default(out)
	if err := v3.Validate(out); err != nil {
		return nil, &invalidError{err}
	}
	return out, nil
}

// infoOf finds the kind of r from its TypeMeta, or from its Go type when
// the TypeMeta is empty.
func infoOf(r v3.Resource) (v3.KindInfo, error) {
	if kind := r.GetTypeMeta().Kind; kind != "" {
		info, err := kindInfo(kind)
		if err != nil {
			return info, err
		}
		if reflect.TypeOf(info.New()) != reflect.TypeOf(r) {
			return v3.KindInfo{}, fmt.Errorf("resource of Go type %T says it is kind %q", r, kind)
		}
		return info, nil
	}
	t := reflect.TypeOf(r)
	for _, info := range v3.Kinds() {
		if info.Stored && info.New != nil && reflect.TypeOf(info.New()) == t {
			return info, nil
		}
	}
	return v3.KindInfo{}, fmt.Errorf("Go type %T is not a stored resource kind", r)
}

// copyResource deep-copies r into a fresh object of its kind with the
// kind and apiVersion set.
func copyResource(info v3.KindInfo, r v3.Resource) (v3.Resource, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%s %q: encoding: %w", info.Kind, r.GetObjectMeta().Name, err)
	}
	out := info.New()
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%s %q: copying: %w", info.Kind, r.GetObjectMeta().Name, err)
	}
	tm := out.GetTypeMeta()
	tm.Kind, tm.APIVersion = info.Kind, v3.APIVersion
	return out, nil
}
