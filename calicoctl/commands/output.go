package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"text/template"

	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Output formats of `get -o`.
const (
	formatPS      = "ps"
	formatWide    = "wide"
	formatYAML    = "yaml"
	formatJSON    = "json"
	formatName    = "name"
	formatColumns = "custom-columns"
)

// printer writes resources in one output format.
type printer struct {
	format string
	// columns are the custom-columns headings.
	columns []string
	// namespace adds a NAMESPACE column to namespaced kinds' tables.
	namespace bool
	// tmpl is the template of go-template and go-template-file.
	tmpl *template.Template
}

// parsePrinter reads the -o value.
func parsePrinter(output string, printNamespace bool) (printer, error) {
	switch output {
	case formatPS, "":
		return printer{format: formatPS, namespace: printNamespace}, nil
	case formatWide:
		return printer{format: formatWide, namespace: printNamespace}, nil
	case formatYAML, "yml":
		return printer{format: formatYAML}, nil
	case formatJSON, formatName:
		return printer{format: output}, nil
	}
	key, value, _ := strings.Cut(output, "=")
	if key == formatTemplate || key == formatTemplateFile {
		t, err := parseTemplate(key, value)
		if err != nil {
			return printer{}, err
		}
		return printer{format: formatTemplate, tmpl: t}, nil
	}
	if key == formatColumns {
		if value == "" {
			return printer{}, fmt.Errorf("need to specify at least one column")
		}
		cols := strings.Split(value, ",")
		for i := range cols {
			cols[i] = strings.ToUpper(strings.TrimSpace(cols[i]))
		}
		return printer{format: formatColumns, columns: cols}, nil
	}
	return printer{}, fmt.Errorf("unrecognized output format '%s'", output)
}

// lookups fetches, once and only when a column needs it, cluster-wide
// values some tables show.
type lookups struct {
	ctx    context.Context
	client *client.Client
	asn    string
}

// clusterASNumber is the AS number of BGPConfiguration "default", 64512
// when it sets none, or "unknown" when it cannot be read.
func (lk *lookups) clusterASNumber() string {
	if lk.asn != "" {
		return lk.asn
	}
	lk.asn = "64512"
	info, err := v3.LookupKind("bgpconfiguration")
	if err != nil || lk.client == nil {
		return lk.asn
	}
	r, err := lk.client.Get(lk.ctx, datastore.Key{Kind: info.Kind, Name: "default"})
	switch {
	case errors.Is(err, datastore.ErrNotFound):
	case err != nil:
		lk.asn = "unknown"
	default:
		if obj, err := toMap(r); err == nil {
			if as := scalar(get(obj, "spec", "asNumber")); as != "" {
				lk.asn = as
			}
		}
	}
	return lk.asn
}

// toMap turns a resource into its JSON object form.
func toMap(r any) (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// listOf wraps resources of one kind in that kind's List document.
func listOf(info v3.KindInfo, rs []v3.Resource, revision string) (v3.List, error) {
	l := info.NewList()
	if err := l.SetResources(rs); err != nil {
		return nil, err
	}
	l.GetListMeta().ResourceVersion = revision
	return l, nil
}

// print writes rs (all of kind info). single says the user named exactly
// one resource, which YAML and JSON then print alone rather than in a
// List; revision is the list's resourceVersion. A template prints a listed
// kind this way; named resources go to execute directly.
func (p printer) print(out io.Writer, lk *lookups, info v3.KindInfo, rs []v3.Resource, single bool, revision string) error {
	switch p.format {
	case formatYAML, formatJSON:
		var doc any
		if single && len(rs) == 1 {
			doc = rs[0]
		} else {
			l, err := listOf(info, rs, revision)
			if err != nil {
				return err
			}
			doc = l
		}
		if p.format == formatJSON {
			b, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "%s\n", b)
			return err
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	case formatTemplate:
		l, err := listOf(info, rs, revision)
		if err != nil {
			return err
		}
		return p.execute(out, lk, []any{l})
	case formatName:
		for _, r := range rs {
			fmt.Fprintf(out, "%s.%s/%s\n", strings.ToLower(info.Kind), v3.Group, r.GetObjectMeta().Name)
		}
		return nil
	}
	return p.table(out, lk, info, rs)
}

// table writes a ps, wide or custom-columns table: upper-case headings,
// columns padded by three spaces, and a blank line after it, as Calico
// prints them.
func (p printer) table(out io.Writer, lk *lookups, info v3.KindInfo, rs []v3.Resource) error {
	t := tableFor(info.Kind)
	headings := t.ps
	switch p.format {
	case formatWide:
		headings = t.wide
	case formatColumns:
		headings = p.columns
	}
	if p.namespace && info.Namespaced && p.format != formatColumns {
		headings = append([]string{"NAMESPACE"}, headings...)
	}
	cols := make([]column, len(headings))
	for i, h := range headings {
		c, ok := t.cols[h]
		if !ok {
			return fmt.Errorf("unknown column %q for %s: valid columns are %s", h, info.Kind, strings.Join(t.names(), ", "))
		}
		cols[i] = c
	}
	w := tabwriter.NewWriter(out, 5, 1, 3, ' ', 0)
	fmt.Fprintln(w, strings.Join(headings, "\t"))
	for _, r := range rs {
		obj, err := toMap(r)
		if err != nil {
			return err
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c(obj, lk)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out)
	return err
}
