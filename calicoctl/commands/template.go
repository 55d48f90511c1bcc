package commands

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"text/template"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Output formats of `get -o` that take a Go template.
const (
	formatTemplate     = "go-template"
	formatTemplateFile = "go-template-file"
)

// parseTemplate reads the template of -o go-template=TEXT or
// -o go-template-file=FILE, with Calico's messages for a missing one.
func parseTemplate(key, value string) (*template.Template, error) {
	text := value
	switch {
	case key == formatTemplate && value == "":
		return nil, fmt.Errorf("need to specify a template")
	case key == formatTemplateFile && value == "":
		return nil, fmt.Errorf("need to specify a template file")
	case key == formatTemplateFile:
		b, err := os.ReadFile(value)
		if err != nil {
			return nil, err
		}
		text = string(b)
	}
	// The functions are bound per run (config reads the datastore), so
	// parsing only needs their names.
	return template.New("get").Funcs(templateFuncs(nil)).Parse(text)
}

// templateFuncs are the functions Calico's calicoctl gives its templates:
// join and joinAndTruncate for lists and maps, and config for cluster-wide
// values ("asnumber").
func templateFuncs(lk *lookups) template.FuncMap {
	return template.FuncMap{
		"join":            func(items any, sep string) string { return joinAndTruncate(items, sep, 0) },
		"joinAndTruncate": joinAndTruncate,
		"config": func(name string) (string, error) {
			if strings.ToLower(name) != "asnumber" {
				return "", fmt.Errorf("config %q is not known: only asnumber is", name)
			}
			return lk.clusterASNumber(), nil
		},
	}
}

// execute runs the template over objects, the list of what get found: the
// List document when a kind was listed, the resources themselves when
// they were named, as Calico's calicoctl does. The fields are the Go
// fields of the types (.Spec.CIDR, .ObjectMeta.Name or .Name, .Items).
// Nothing is written unless the whole template runs.
func (p printer) execute(out io.Writer, lk *lookups, objects []any) error {
	t, err := p.tmpl.Clone()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := t.Funcs(templateFuncs(lk)).Execute(&buf, objects); err != nil {
		return err
	}
	_, err = buf.WriteTo(out)
	return err
}

// objects turns resources into the template's list.
func objects(rs []v3.Resource) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// joinAndTruncate renders a list (or a map, as sorted key=value pairs, or
// a single value) joined by sep, cut to maxLen with "..." when maxLen > 0.
func joinAndTruncate(items any, sep string, maxLen int) string {
	if items == nil {
		return ""
	}
	v := reflect.ValueOf(items)
	var parts []string
	switch v.Kind() {
	case reflect.Map:
		for _, k := range v.MapKeys() {
			parts = append(parts, fmt.Sprintf("%v=%v", k.Interface(), v.MapIndex(k).Interface()))
		}
		sort.Strings(parts)
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
	default:
		parts = []string{fmt.Sprint(items)}
	}
	s := strings.Join(parts, sep)
	const ellipsis = "..."
	if maxLen > 0 && len(s) > maxLen {
		s = s[:max(maxLen-len(ellipsis), 0)] + ellipsis
	}
	return s
}
