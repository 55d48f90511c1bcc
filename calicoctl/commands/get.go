package commands

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

type getOptions struct {
	files  fileOptions
	ns     nsOptions
	output string
}

func newGetCommand(a *app) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get ( KIND [NAME...] | -f FILENAME )",
		Short: "Display resources by filename, stdin, or kind and names",
		Long: `Display one or many resources identified by file, stdin or kind and names.
The kind is case-insensitive and may be pluralised or abbreviated (ippool,
ipPools, pool). Without names, every resource of the kind is listed.

Output formats (-o): ps (default), wide, yaml, json, name,
custom-columns=COL1,COL2 naming columns of the ps and wide tables,
go-template=TEMPLATE and go-template-file=FILE. A Go template runs over the
list of what was found: the List document (use .Items) when a kind is
listed, the resources when they are named; fields are the Go field names
(.Name, .Spec.CIDR), with the functions join, joinAndTruncate and config.`,
		Example: "  calicoctl get ippools\n  calicoctl get -o yaml networkpolicy allow-web -n prod",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePrinter(o.output, o.ns.allNamespaces || o.ns.namespace != "")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			info, named, err := loadTargets(a.env.In, &o.files, &o.ns, args, targetForm{
				byName:  "KIND [NAME...]",
				minArgs: 1, tooFew: "get needs a kind (for example: calicoctl get ippools) or -f FILENAME",
				fileNSFailed: "Failed to get resources", namedFailed: "Failed to get resources",
			})
			if err != nil {
				return err
			}
			c, closeFn, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			lk := &lookups{ctx: ctx, client: c}

			if len(named) == 0 {
				probe := info.New()
				if err := o.ns.apply(probe); err != nil {
					return fmt.Errorf("Failed to get resources: %w", err)
				}
				items, bad, rev, err := c.ListWithBadValues(ctx, datastore.ListOptions{Kind: info.Kind, Namespace: probe.GetObjectMeta().Namespace})
				if err != nil {
					return fmt.Errorf("Failed to get resources: %s", describe(err))
				}
				// Stored values that are not valid resources are named
				// on stderr; the good ones are listed all the same.
				for _, bv := range bad {
					fmt.Fprintf(a.env.ErrOut, "Skipping %s\n", bv)
				}
				return p.print(a.env.Out, lk, info, items, false, rev)
			}

			// Named resources: print those found, kind by kind in the
			// order given, then report the missing ones.
			var errs []string
			var found []v3.Resource
			for _, r := range named {
				m := r.GetObjectMeta()
				if m.Namespace == "" && isNamespaced(r) {
					errs = append(errs, "cannot use --all-namespaces flag for getting a single resource")
					continue
				}
				got, err := c.Get(ctx, keyOf(r))
				if err != nil {
					errs = append(errs, describe(err))
					continue
				}
				found = append(found, got)
			}
			groups := byKind(found)
			if p.format == formatTemplate {
				// A template runs once over everything found, in order.
				groups = nil
				if err := p.execute(a.env.Out, lk, objects(found)); err != nil {
					return err
				}
			}
			for _, group := range groups {
				gi, _ := v3.KindByName(group[0].GetTypeMeta().Kind)
				if err := p.print(a.env.Out, lk, gi, group, len(named) == 1, ""); err != nil {
					return err
				}
			}
			if len(errs) > 0 {
				return errors.New(strings.Join(errs, "\n"))
			}
			return nil
		},
	}
	o.files.register(cmd, "get")
	o.ns.register(cmd, true)
	cmd.Flags().StringVarP(&o.output, "output", "o", formatPS,
		"Output format. One of: ps, wide, yaml, json, name, custom-columns=COL1,COL2, go-template=TEMPLATE, go-template-file=FILE.")
	return cmd
}

// isNamespaced says whether r's kind is namespaced.
func isNamespaced(r v3.Resource) bool {
	info, ok := v3.KindByName(r.GetTypeMeta().Kind)
	return ok && info.Namespaced
}

// byKind groups resources by kind, keeping the order of first appearance.
func byKind(rs []v3.Resource) [][]v3.Resource {
	var out [][]v3.Resource
	idx := map[string]int{}
	for _, r := range rs {
		k := r.GetTypeMeta().Kind
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}
