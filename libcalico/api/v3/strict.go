package v3

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
)

// This file checks a generic JSON value against a Go type before it is
// decoded, because encoding/json matches field names case-insensitively and
// reports neither the path nor the value of a mistake.

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	portType        = reflect.TypeFor[numorstring.Port]()
)

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func typeOfValue(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// checkValue returns every problem found in v for type t at path.
func checkValue(path string, v any, t reflect.Type) []error {
	var errs []error
	walk(path, v, t, &errs)
	return errs
}

func walk(path string, v any, t reflect.Type, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		if v == nil {
			return
		}
		t = t.Elem()
	}
	if v == nil {
		// null leaves the zero value, as encoding/json does.
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		b, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b)
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w%s", displayPath(path), err, invisibleHint(v)))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			*errs = append(*errs, errors.New(typeMismatch(path, v, "object")))
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				*errs = append(*errs, errors.New(unknownField(joinPath(path, k), fields)))
				continue
			}
			walk(joinPath(path, k), m[k], f, errs)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			*errs = append(*errs, errors.New(typeMismatch(path, v, "object")))
			return
		}
		for _, k := range sortedKeys(m) {
			walk(joinPath(path, k), m[k], t.Elem(), errs)
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			want := "list" + elemName(t.Elem())
			if _, isObject := v.(map[string]any); isObject {
				want += " (start each item with \"- \")"
			}
			*errs = append(*errs, errors.New(typeMismatch(path, v, want)))
			return
		}
		for i, e := range l {
			walk(fmt.Sprintf("%s[%d]", path, i), e, t.Elem(), errs)
		}
	case reflect.String:
		switch v.(type) {
		case string:
		case json.Number, bool:
			*errs = append(*errs, errors.New(typeMismatch(path, v, "string (put the value in quotes)")))
		default:
			*errs = append(*errs, errors.New(typeMismatch(path, v, "string")))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			*errs = append(*errs, errors.New(typeMismatch(path, v, "boolean (true or false)")))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		checkInteger(path, v, t, errs)
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			*errs = append(*errs, errors.New(typeMismatch(path, v, "number")))
		}
	}
}

// checkInteger accepts a JSON number that is a whole number within the
// range of t.
func checkInteger(path string, v any, t reflect.Type, errs *[]error) {
	num, ok := v.(json.Number)
	if !ok {
		*errs = append(*errs, errors.New(typeMismatch(path, v, "integer")))
		return
	}
	var lo, hi float64
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi = 0, math.Pow(2, float64(t.Bits()))-1
	default:
		lo, hi = -math.Pow(2, float64(t.Bits()-1)), math.Pow(2, float64(t.Bits()-1))-1
	}
	f, err := strconv.ParseFloat(num.String(), 64)
	if err != nil || f != math.Trunc(f) {
		*errs = append(*errs, errors.New(typeMismatch(path, v, "integer")))
		return
	}
	if f < lo || f > hi {
		*errs = append(*errs, fmt.Errorf("%s: %s is out of range %.0f-%.0f", displayPath(path), num, lo, hi))
	}
}

// jsonFields maps the JSON names of t's fields (including those of
// embedded structs without a name) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// unknownField explains a field that t does not have, suggesting the right
// spelling when only the case differs.
func unknownField(path string, fields map[string]reflect.Type) string {
	last := path
	if i := strings.LastIndex(path, "."); i >= 0 {
		last = path[i+1:]
	}
	for name := range fields {
		if strings.EqualFold(name, last) {
			return fmt.Sprintf("unknown field %q (field names are case-sensitive: did you mean %q?)", path, name)
		}
	}
	return fmt.Sprintf("unknown field %q", path)
}

// typeMismatch explains a value of the wrong JSON type.
func typeMismatch(path string, v any, want string) string {
	msg := fmt.Sprintf("cannot use %s, want %s", describeValue(v), want)
	if path == "" {
		return msg
	}
	return displayPath(path) + ": " + msg
}

// describeValue renders a generic JSON value with its type.
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case json.Number:
		return "number " + x.String()
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", v)
}

// elemName describes the element type of a list for "want list of ...".
func elemName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == portType:
		return " of ports"
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return " of strings"
	case reflect.Struct, reflect.Map:
		return " of objects"
	}
	return ""
}

// invisibleHint points out invisible or unusual space characters (often
// pasted from web pages) in a string value.
func invisibleHint(v any) string {
	s, ok := v.(string)
	if !ok {
		return ""
	}
	for _, r := range s {
		if r > unicode.MaxASCII && (unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)) {
			return fmt.Sprintf(" (the value contains the invisible character U+%04X)", r)
		}
	}
	return ""
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "value"
	}
	return path
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
