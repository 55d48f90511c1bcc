package commands

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

type labelOptions struct {
	ns        nsOptions
	overwrite bool
	remove    bool
}

func newLabelCommand(a *app) *cobra.Command {
	o := &labelOptions{}
	cmd := &cobra.Command{
		Use:   "label KIND NAME ( KEY=VALUE [--overwrite] | KEY --remove )",
		Short: "Add, update or remove a label of a resource",
		Long: `Set, update or remove one label of a resource. Setting a key that is
already present needs --overwrite; removing a key that is absent is an error.`,
		Example: "  calicoctl label node node1 rack=r1\n  calicoctl label node node1 rack --remove",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, kv := args[0], args[1], args[2]
			key, value := kv, ""
			if !o.remove {
				var ok bool
				key, value, ok = strings.Cut(kv, "=")
				if !ok || key == "" || strings.Contains(value, "=") {
					return fmt.Errorf("invalid label %s", kv)
				}
			}
			ctx := cmd.Context()
			f, err := a.fetchNamed(ctx, kind, name, &o.ns, func(_ v3.KindInfo, err error) error {
				return fmt.Errorf("failed to get %s %s, error %s", kind, name, describe(err))
			})
			if err != nil {
				return err
			}
			defer f.close()
			c, r := f.c, f.r
			m := r.GetObjectMeta()
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			old, present := m.Labels[key]
			msg := "Successfully set label %s on %s %s\n"
			switch {
			case o.remove && !present:
				return fmt.Errorf("cannot remove label of %s %s, key %s does not exist", kind, name, key)
			case o.remove:
				delete(m.Labels, key)
				msg = "Successfully removed label %s from %s %s\n"
			case present && old != value && !o.overwrite:
				return fmt.Errorf("failed to update label of %s %s, key %s is already present. please use '--overwrite' to set a new value.", kind, name, key)
			case present:
				m.Labels[key] = value
				msg = "Successfully updated label %s on %s %s\n"
			default:
				m.Labels[key] = value
			}
			if _, err := c.Update(ctx, r); err != nil {
				return fmt.Errorf("failed to update %s %s, label not changed: %s", kind, name, describe(err))
			}
			fmt.Fprintf(a.env.Out, msg, key, kind, name)
			return nil
		},
	}
	o.ns.register(cmd, false)
	cmd.Flags().BoolVar(&o.overwrite, "overwrite", false, "Overwrite the value of a key that is already present.")
	cmd.Flags().BoolVar(&o.remove, "remove", false, "Remove the label KEY.")
	return cmd
}
