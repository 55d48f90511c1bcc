package v3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Decode reads resources from YAML or JSON: one or more documents
// (separated by "---" in YAML, or concatenated JSON objects), each a
// resource or a List kind whose items are expanded. Decoding is strict:
// unknown fields (matched case-sensitively), values of the wrong type,
// unknown kinds and other apiVersions are errors naming the document, the
// field path and the value. Empty documents are skipped. The resources are
// neither defaulted nor validated.
func Decode(data []byte) ([]Resource, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	if len(docs) > 1 && commentOnly(docs[0].yaml) {
		return nil, fmt.Errorf("document 1 (lines 1-%d) holds only comments: Calico's calicoctl refuses a file whose first document has no resource; put the comment in the next document or drop the \"---\" after it", docs[1].firstLine-2)
	}
	var out []Resource
	for i, d := range docs {
		rs, err := decodeDocument(i+1, d)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// document is one document of the input, converted to JSON.
type document struct {
	json []byte
	// firstLine is the 1-based line of the input the document starts on.
	firstLine int
	// yaml is the document's source text (nil for JSON input).
	yaml []byte
}

// splitDocuments cuts the input into documents and converts each to JSON.
func splitDocuments(data []byte) ([]document, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return splitJSON(data)
	}
	var docs []document
	lines := strings.SplitAfter(string(data), "\n")
	start := 0
	flush := func(end int) error {
		text := strings.Join(lines[start:end], "")
		n := len(docs) + 1
		j, err := yaml.YAMLToJSONStrict([]byte(text))
		if err != nil {
			return fmt.Errorf("document %d: %s", n, yamlError(err, text, start))
		}
		docs = append(docs, document{json: j, firstLine: start + 1, yaml: []byte(text)})
		return nil
	}
	for i, l := range lines {
		if isDocumentSeparator(l) {
			if err := flush(i); err != nil {
				return nil, err
			}
			start = i + 1
		}
	}
	if err := flush(len(lines)); err != nil {
		return nil, err
	}
	return docs, nil
}

// commentOnly reports whether a YAML document's text has comments and
// nothing else but blank lines.
func commentOnly(text []byte) bool {
	comments := false
	for _, l := range strings.Split(string(text), "\n") {
		switch t := strings.TrimSpace(l); {
		case t == "":
		case strings.HasPrefix(t, "#"):
			comments = true
		default:
			return false
		}
	}
	return comments
}

// isDocumentSeparator reports whether a line is a YAML "---" marker.
func isDocumentSeparator(line string) bool {
	l := strings.TrimRight(line, " \t\r\n")
	return l == "---" || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "---\t")
}

// splitJSON reads a stream of JSON values.
func splitJSON(data []byte) ([]document, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var docs []document
	for {
		start := dec.InputOffset()
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("document %d: invalid JSON: line %d: %s",
					len(docs)+1, lineOf(data, int(se.Offset)), se.Error())
			}
			return nil, fmt.Errorf("document %d: invalid JSON: %w", len(docs)+1, err)
		}
		docs = append(docs, document{json: raw, firstLine: lineOf(data, int(start))})
	}
}

// lineOf returns the 1-based line number of a byte offset.
func lineOf(data []byte, offset int) int {
	if offset > len(data) {
		offset = len(data)
	}
	return bytes.Count(data[:offset], []byte("\n")) + 1
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

// yamlError rewrites a YAML parser error with line numbers counted from the
// start of the whole input, and adds hints for common typing mistakes.
func yamlError(err error, text string, offset int) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = yamlLineRE().ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
		return "line " + strconv.Itoa(n+offset)
	})
	msg = "invalid YAML: " + msg
	for i, l := range strings.Split(text, "\n") {
		content, _, _ := strings.Cut(l, "#")
		if strings.TrimSpace(content) == "" {
			continue
		}
		switch {
		case strings.ContainsAny(content, "：﹕꞉"):
			msg += fmt.Sprintf("; line %d uses a full-width colon %q: write \": \"", i+1+offset, strings.TrimSpace(content))
		case missingSpaceRE().MatchString(content):
			msg += fmt.Sprintf("; line %d %q needs a space after the colon", i+1+offset, strings.TrimSpace(content))
		}
	}
	return msg
}

// missingSpaceRE matches "key:value" lines, a mapping written without the
// space YAML requires after the colon.
var missingSpaceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*(- )?[A-Za-z][A-Za-z0-9_.-]*:[^\s:/]`) })

// decodeDocument turns one document into resources.
func decodeDocument(n int, d document) ([]Resource, error) {
	if t := bytes.TrimSpace(d.json); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(d.json))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("document %d: %w", n, err)
	}
	obj, ok := generic.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("document %d: %s", n, typeMismatch("", generic, "object"))
	}
	kind, err := stringField(obj, "kind")
	if err != nil {
		return nil, fmt.Errorf("document %d: %w", n, err)
	}
	if kind == "" {
		return nil, fmt.Errorf("document %d: missing kind", n)
	}
	where := fmt.Sprintf("document %d", n)
	if info, isList := KindByListName(kind); isList {
		return decodeList(where, info, obj)
	}
	info, known := KindByName(kind)
	if !known {
		return nil, fmt.Errorf("document %d: %s", n, unknownKind(kind))
	}
	r, err := decodeObject(where, info, obj)
	if err != nil {
		return nil, err
	}
	return []Resource{r}, nil
}

// unknownKind explains a kind that is not registered, suggesting the right
// spelling when the user typed an alias or the wrong case.
func unknownKind(kind string) string {
	if k, err := LookupKind(kind); err == nil {
		return fmt.Sprintf("unknown kind %q (did you mean %q?)", kind, k.Kind)
	}
	return fmt.Sprintf("unknown kind %q", kind)
}

// stringField reads an optional top-level string field.
func stringField(obj map[string]any, key string) (string, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", errors.New(typeMismatch(key, v, "string"))
	}
	return s, nil
}

// describe names a document or list item for error messages.
func describe(where, kind string, obj map[string]any) string {
	if md, ok := obj["metadata"].(map[string]any); ok {
		if name, ok := md["name"].(string); ok && name != "" {
			return fmt.Sprintf("%s (%s %q)", where, kind, name)
		}
	}
	return fmt.Sprintf("%s (%s)", where, kind)
}

// checkAPIVersion refuses any apiVersion but projectcalico.org/v3.
func checkAPIVersion(obj map[string]any) error {
	v, err := stringField(obj, "apiVersion")
	if err != nil {
		return err
	}
	switch v {
	case APIVersion:
		return nil
	case "":
		return fmt.Errorf("missing apiVersion, want %s", APIVersion)
	}
	return fmt.Errorf("apiVersion %q is not supported, want %s", v, APIVersion)
}

// decodeObject strictly decodes one resource.
func decodeObject(where string, info KindInfo, obj map[string]any) (Resource, error) {
	label := describe(where, info.Kind, obj)
	if err := checkAPIVersion(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if errs := checkValue("", obj, typeOfValue(info.New())); len(errs) > 0 {
		return nil, labelled(label, errs)
	}
	if errs := schemaProblems(info.Kind, obj); len(errs) > 0 {
		return nil, labelled(label, errs)
	}
	r := info.New()
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	return r, nil
}

// labelled joins problems, each prefixed with what they were found in.
func labelled(label string, errs []error) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s: %w", label, e)
	}
	return errors.Join(out...)
}

// decodeList expands the items of a List kind, giving each the list's kind
// and apiVersion when it has none.
func decodeList(where string, info KindInfo, obj map[string]any) ([]Resource, error) {
	label := describe(where, info.ListKind, obj)
	if err := checkAPIVersion(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	for key, v := range obj {
		switch key {
		case "kind", "apiVersion", "items":
		case "metadata":
			if errs := checkValue("metadata", v, typeOf[ListMeta]()); len(errs) > 0 {
				return nil, labelled(label, errs)
			}
		default:
			return nil, fmt.Errorf("%s: %s", label, unknownField(key, nil))
		}
	}
	raw, ok := obj["items"]
	if !ok || raw == nil {
		return nil, nil
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: %s", label, typeMismatch("items", raw, "list"))
	}
	out := make([]Resource, 0, len(items))
	for i, it := range items {
		itemWhere := fmt.Sprintf("%s, item %d", where, i+1)
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %s", itemWhere, typeMismatch("", it, "object"))
		}
		kind, err := stringField(m, "kind")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", itemWhere, err)
		}
		switch kind {
		case "":
			m["kind"] = info.Kind
		case info.Kind:
		default:
			return nil, fmt.Errorf("%s: kind %q does not belong in a %s", itemWhere, kind, info.ListKind)
		}
		if v, _ := m["apiVersion"].(string); v == "" {
			m["apiVersion"] = obj["apiVersion"]
		}
		r, err := decodeObject(itemWhere, info, m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
